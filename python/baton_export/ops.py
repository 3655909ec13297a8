"""baton's decoder ops as PyTorch custom ops (torch.ops.baton.*), so a module written with them
exports to their targets: rope and attention (stateless; the KV cache is an input here, while
export_causal_lm keeps it as plan state). Eagerly they compute what baton's definitions say
(baton_export.reference), so check=True compares like with like."""
from typing import Optional

import torch

from . import reference


@torch.library.custom_op("baton::rope", mutates_args=())
def rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, head_dim: int,
         interleaved: bool = False, scale: float = 1.0) -> torch.Tensor:
    """x [..., H*head_dim] rotated by positions [rows] (HF's rotate_half form)."""
    return reference._rope(x, positions, inv_freq, head_dim, scale, interleaved)


@rope.register_fake
def _(x, positions, inv_freq, head_dim, interleaved=False, scale=1.0):
    return torch.empty_like(x)


@torch.library.custom_op("baton::attention", mutates_args=())
def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              positions: torch.Tensor, head_dim: int, n_heads: int, n_kv_heads: int,
              scale: Optional[float] = None) -> torch.Tensor:
    """Query row r attends causally to cache rows 0..positions[r]."""
    return reference._attention(q, k_cache, v_cache, positions, head_dim, n_heads, n_kv_heads,
                                scale)


@attention.register_fake
def _(q, k_cache, v_cache, positions, head_dim, n_heads, n_kv_heads, scale=None):
    return torch.empty_like(q)
