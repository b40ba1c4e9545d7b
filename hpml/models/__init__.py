"""LightningModules by family: image classifier, text classifier, VAE."""
