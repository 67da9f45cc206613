"""Moved to :mod:`jaxrl.workflow.plots`; this path works for one more release, with a DeprecationWarning."""

from jaxrl._deprecated import forward

forward("jaxrl.plots")
