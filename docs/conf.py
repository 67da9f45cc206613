"""Sphinx configuration for jaxrl's documentation.

Build with ``python -m sphinx -W -b html docs docs/_build/html`` from the repository root.
Notebooks are rendered without running them unless ``JAXRL_DOCS_EXECUTE=1`` is set; links
into other projects' docs (intersphinx) need the network and are on only with
``JAXRL_DOCS_INTERSPHINX=1``. See ``docs/contributing.md``.
"""

import importlib.util
import os
import pathlib
import sys

DOCS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))  # the jaxrl_docs extension
sys.path.insert(0, str(DOCS.parent))  # jaxrl itself, installed or not

project = "jaxrl"
author = "the jaxrl authors"
copyright = "the jaxrl authors"
release = version = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "myst_nb",
    "jaxrl_docs",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# -- API pages from docstrings -------------------------------------------------------
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True  # signatures show defaults as written in the source, not their repr
# The Gymnasium bridge needs gymnasium to import; stand in for it where it is missing.
autodoc_mock_imports = [name for name in ("gymnasium",) if importlib.util.find_spec(name) is None]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_attr_annotations = True  # "Attributes:" entries take the field's annotation as their type
add_module_names = False

# -- Notebooks (myst-nb) -------------------------------------------------------------
# Stored without outputs; rendered as they are unless JAXRL_DOCS_EXECUTE=1, which runs
# each one top to bottom (minutes on a CPU) in a temporary directory.
nb_execution_mode = "force" if os.environ.get("JAXRL_DOCS_EXECUTE") == "1" else "off"
nb_execution_in_temp = True
nb_execution_timeout = 1800
nb_execution_raise_on_error = True
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# -- Links into other projects' docs: off unless asked for (they are fetched online) ---
intersphinx_mapping = {}
if os.environ.get("JAXRL_DOCS_INTERSPHINX") == "1":
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "jax": ("https://docs.jax.dev/en/latest", None),
        "flax": ("https://flax.readthedocs.io/en/latest", None),
        "optax": ("https://optax.readthedocs.io/en/latest", None),
    }

# -- HTML ----------------------------------------------------------------------------
html_theme = "furo"
html_title = "jaxrl"
html_static_path = []
