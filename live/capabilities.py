"""What each live backend can carry out: its policy capabilities and its draft methods.

Kept apart from the backends themselves so that choosing a backend, checking a policy's
requirements or recording a run never imports an engine (torch, vLLM).
"""

from __future__ import annotations

from simctl.policies.contract import Capability
from simctl.policies.draft_methods import ALL_METHODS, DraftMethod

TORCH_CAPABILITIES = frozenset(
    {
        Capability.PLACE,
        Capability.CHUNK,
        Capability.PRIORITY,
        Capability.MIGRATE,
        Capability.SPEC_PER_WORKER,
        Capability.SPEC_PER_REQUEST,
        Capability.REPLICAS,
    }
)
# every trace method runs on the torch engine (some approximated: history -> suffix,
# eagle -> W4 self-draft; live/drafters.py says which)
TORCH_DRAFT_METHODS = frozenset(ALL_METHODS)

VLLM_CAPABILITIES = frozenset(
    {Capability.PLACE, Capability.CHUNK, Capability.PRIORITY, Capability.MIGRATE, Capability.SPEC_PER_WORKER}
)
# the model-free drafters vLLM has on CPU
VLLM_DRAFT_METHODS = frozenset({DraftMethod.NGRAM.value, DraftMethod.SUFFIX.value})
