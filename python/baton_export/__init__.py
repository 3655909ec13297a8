"""baton_export: PyTorch modules (torch.export) and Hugging Face causal LMs to baton plans."""
from ._export import ExportResult, export
from ._init import seeded_normal_, seeded_uniform_
from ._plan import ExportError

__all__ = ["export", "export_causal_lm", "ExportError", "ExportResult", "seeded_normal_",
           "seeded_uniform_"]
__version__ = "0.1.0"


def export_causal_lm(model, out_dir, *, max_seq_len, device="cuda:0", dtype=None, **kw):
    """See baton_export._llm.export_causal_lm."""
    from ._llm import export_causal_lm as f

    return f(model, out_dir, max_seq_len=max_seq_len, device=device, dtype=dtype, **kw)
