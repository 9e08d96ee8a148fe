"""envkit: set up, check and train PyTorch on Apple Silicon (MPS), CUDA and CPU."""

__version__ = "0.1.0"
