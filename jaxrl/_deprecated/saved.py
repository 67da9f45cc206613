"""Moved to :mod:`jaxrl.workflow.saved`; this path works for one more release, with a DeprecationWarning."""

from jaxrl._deprecated import forward

__getattr__ = forward("jaxrl.saved")
