"""Tells AutoGraph that the toolkit's own TensorFlow code is written in graph style, so it is traced as written.

AutoGraph rewrites each Python function a graph is traced from (a dataset's map function, a Keras layer's `call`)
into one whose `if` and `for` on tensors become graph control flow: it parses the source, transforms it and loads
the result as a module, once per function and process. The toolkit's data pipelines, models and tables use
TensorFlow's control flow ops where they need any, so that rewriting only cost each chief, evaluator and exporter
its CPU (docs/performance.md, "A chief's start"). A user's own map
functions, layers and models are still converted: the rule is by module name, and tf.data and Keras look at each
function they trace on its own.
"""

from __future__ import annotations

GRAPH_STYLE_PACKAGES = ("data", "models", "tables")  # whose traced functions need no AutoGraph: their tests say so


def trace_toolkit_code_as_written() -> None:
    """Adds a do-not-convert rule for each of GRAPH_STYLE_PACKAGES to AutoGraph's rules (once per process; a fork
    keeps them). Call it where TensorFlow may be imported."""
    from tensorflow.python.autograph.core import config, config_lib

    known = {rule._prefix for rule in config.CONVERSION_RULES}  # noqa: SLF001  the rule's one field
    added = tuple(config_lib.DoNotConvert(name) for name in GRAPH_STYLE_PACKAGES if name not in known)
    config.CONVERSION_RULES = (*added, *config.CONVERSION_RULES)
