"""hpml: Hydra-composed experiments that profile, prune, quantise and compare deep networks."""
