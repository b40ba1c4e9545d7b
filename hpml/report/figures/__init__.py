"""The report's plots, one family a module, each drawn only when the runs carry its data
(:mod:`hpml.report.canvas` renders them as SVG with tooltips)."""

from hpml.report.figures.batch import batch_scaling, time_shares
from hpml.report.figures.curves import learning_curves
from hpml.report.figures.memory import memory
from hpml.report.figures.pareto import latency_size, pareto
from hpml.report.figures.sparsity import sparsity

PLOTS = (batch_scaling, time_shares, sparsity, latency_size, memory)  # each plot(runs, keys)

__all__ = ["PLOTS", "batch_scaling", "learning_curves", "pareto"]
