"""baton_export: PyTorch modules (torch.export), Hugging Face causal LMs and jitted JAX functions
(baton_export.jax) to baton plans. torch is imported on first use, so that the JAX front end
works where only jax is installed."""
from ._base import ExportError

__all__ = ["export", "export_causal_lm", "ExportError", "ExportResult", "seeded_normal_",
           "seeded_uniform_"]
__version__ = "0.1.0"


def __getattr__(name):
    if name in ("export", "ExportResult"):
        from . import _export

        return getattr(_export, name)
    if name in ("seeded_normal_", "seeded_uniform_"):
        from . import _init

        return getattr(_init, name)
    raise AttributeError(f"module 'baton_export' has no attribute '{name}'")


def export_causal_lm(model, out_dir, *, max_seq_len, device="cuda:0", dtype=None, **kw):
    """See baton_export._llm.export_causal_lm."""
    from ._llm import export_causal_lm as f

    return f(model, out_dir, max_seq_len=max_seq_len, device=device, dtype=dtype, **kw)
