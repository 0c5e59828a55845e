"""osdp in PyTorch: the gpt family as ``nn.Module`` s and exported plans applied with FSDP2."""
from .apply import (SlicedEmbedding, SlicedLinear, apply_plan, gather_sliced, load_export, make_meshes,
                    split_module)
from .gpt import GPT, GPTConfig, Stage, module_path

__all__ = ["GPT", "GPTConfig", "Stage", "module_path", "SlicedLinear", "SlicedEmbedding", "apply_plan",
           "load_export", "make_meshes", "split_module", "gather_sliced"]
