"""Fused training arrays (HFTA): N same-shaped models trained as one."""
