"""Moved to :mod:`jaxrl.workflow.cli`; this path works for one more release, with a DeprecationWarning."""

from jaxrl._deprecated import forward

__getattr__ = forward("jaxrl.cli")
