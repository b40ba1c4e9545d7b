"""hpml on a GPU machine that lacks hpml's dependencies: a wheel kit to carry there, and a check
that installs it and runs hpml's CUDA paths, each part under a time budget."""
