"""Moved to :mod:`jaxrl.algorithms.onpolicy`; this path works for one more release, with a DeprecationWarning."""

from jaxrl._deprecated import forward

__getattr__ = forward("jaxrl.onpolicy")
