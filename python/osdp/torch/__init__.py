"""osdp in PyTorch: the gpt family as ``nn.Module`` s, transformers' models of Hugging Face configs
(``osdp.torch.hf``, needs transformers), and exported plans applied with FSDP2."""
from .apply import (SlicedEmbedding, SlicedLinear, apply_plan, check_plan, full_parameters, gather_sliced,
                    load_export, make_meshes, module_paths, split_module)
from .gpt import GPT, GPTConfig, Stage, module_path

__all__ = ["GPT", "GPTConfig", "Stage", "module_path", "SlicedLinear", "SlicedEmbedding", "apply_plan",
           "check_plan", "load_export", "make_meshes", "split_module", "gather_sliced", "full_parameters",
           "module_paths"]
