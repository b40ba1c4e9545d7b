"""LightningDataModules, the files they read and their transforms as config."""
