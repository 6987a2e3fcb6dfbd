"""Reading a checkpoint without its tensors: files and folders, safetensors headers, the bounds."""
