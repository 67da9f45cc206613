# Import jaxrl before any test module touches JAX, so its XLA settings (jaxrl/_xla.py:
# the flag that avoids an XLA:CPU deadlock on vmapped programs) apply to the suite.
import jaxrl  # noqa: F401
