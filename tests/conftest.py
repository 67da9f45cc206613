# Import jaxrl before any test module touches JAX, so its XLA settings (jaxrl/_xla.py:
# the flag that avoids an XLA:CPU deadlock on vmapped programs) apply to the suite.
import jaxrl  # noqa: F401


def pytest_collection_modifyitems(items):
    """Run the slow learning tests first (stable order otherwise): with
    ``-n 2 --dist worksteal`` the two workers start on the long tests and the short ones
    fill the gaps, instead of one worker finishing alone on a learning test."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
