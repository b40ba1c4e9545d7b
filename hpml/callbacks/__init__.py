"""Lightning callbacks: each decides *when* to measure or act; ``hpml.analysis`` decides *how*."""
