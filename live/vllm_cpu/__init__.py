"""vLLM CPU backend support: install script and the rejection-sampler fix plugin."""
