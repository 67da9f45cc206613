"""Replay buffers held in device arrays: pure ``init / add / sample`` functions.

* :mod:`jaxrl.buffers.replay`: uniform ring buffer, rows of ``N`` env transitions,
  n-step windows that follow one env's stream.
* :mod:`jaxrl.buffers.prioritized`: proportional prioritized replay over a sum-tree.
* :mod:`jaxrl.buffers.sumtree`: the sum-tree itself.
* :mod:`jaxrl.buffers.sequence`: prioritized replay of overlapping fixed-length
  sequences with their entering recurrent state (R2D2).
"""

from jaxrl.buffers import prioritized, replay, sequence, sumtree
from jaxrl.buffers.replay import Index, ReplayState, memory_limit, nbytes

__all__ = ["prioritized", "replay", "sequence", "sumtree", "Index", "ReplayState", "memory_limit", "nbytes"]
