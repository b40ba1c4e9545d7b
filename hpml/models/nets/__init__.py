"""Plain ``nn.Module`` networks with no Lightning in them, usable from any PyTorch loop."""
