"""W4 round-to-nearest fake quantisation, to build a self-drafter from the target itself
(EfficientRollout's drafter): same architecture and vocabulary, slightly perturbed weights,
so it agrees with the target most of the time without any training.

Fake quantisation: weights are quantised and immediately dequantised back to the model dtype.
That reproduces the drafter's numerics (hence its acceptance rate) but not the speed of a real
W4 kernel; timing a W4 drafter needs a real kernel or a cost model.
"""

from __future__ import annotations

import copy

import torch


def rtn_quantize(
    weight: torch.Tensor, *, bits: int = 4, group_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-group round-to-nearest along the input dimension.

    Returns (dequantised weight, same shape and dtype; scales [out, n_groups], float32).
    Each element's error is at most half its group's scale, because the scale maps the group's
    absmax exactly onto the largest code, so nothing is ever clipped. A trailing partial group
    is zero-padded; zeros cannot raise the absmax, so padding does not change any scale.
    """
    if weight.ndim != 2:
        raise ValueError(f"expected a 2D weight, got shape {tuple(weight.shape)}")
    if bits < 2 or group_size < 1:
        raise ValueError(f"need bits >= 2 and group_size >= 1, got {bits}, {group_size}")
    qmax = 2 ** (bits - 1) - 1
    out_features, in_features = weight.shape
    n_groups = -(-in_features // group_size)
    w = weight.detach().to(torch.float32)
    pad = n_groups * group_size - in_features
    if pad:
        w = torch.nn.functional.pad(w, (0, pad))
    groups = w.reshape(out_features, n_groups, group_size)
    absmax = groups.abs().amax(dim=-1, keepdim=True)
    scales = torch.where(absmax > 0, absmax / qmax, torch.ones_like(absmax))
    codes = torch.clamp(torch.round(groups / scales), -qmax - 1, qmax)
    deq = (codes * scales).reshape(out_features, -1)[:, :in_features]
    return deq.to(weight.dtype), scales.squeeze(-1)


@torch.no_grad()
def quantize_w4_rtn(
    model: torch.nn.Module,
    *,
    group_size: int = 128,
    bits: int = 4,
    skip: tuple[str, ...] = ("lm_head",),
) -> torch.nn.Module:
    """Fake-quantised deep copy of `model`: every `nn.Linear` weight whose module name does not
    end in one of `skip` goes through `rtn_quantize`; the original model is untouched.

    The LM head is skipped by default, as in common W4 recipes: it is small next to the
    decoder and quantising it hurts the token distribution most directly.
    """
    quantized = copy.deepcopy(model)
    for name, module in quantized.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith(skip):
            deq, _ = rtn_quantize(module.weight, bits=bits, group_size=group_size)
            module.weight.copy_(deq)
    return quantized.eval()
