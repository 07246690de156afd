"""A user's model function (`training.model` = "package.module:function"): found, checked and called alike.

`load` finds a user's dataset function (`training.dataset`) the same way (data/user_pipeline.py checks the rest).

The chief builds the model with `function(**keyword_arguments(function, input_shape=..., num_classes=...,
feature_spec=...))`: what the data gives (docs/your-data.md), each argument only if the function takes it. The
launcher runs `python -m cluster.user_model SPEC` on the lead's host before any task starts, with the chief's
interpreter, directory and environment: it prints one line per problem as JSON (`[]` when the function is
usable) and imports the module only once `find_spec` has found it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import sys
from typing import Callable

from common.errors import Problem, UserError

FIELD = "training.model"
ARGUMENTS = ("input_shape", "num_classes", "feature_spec")
CHECK_TIMEOUT_S = 120  # the module may import TensorFlow: seconds on a loaded machine


def split(spec: str) -> tuple[str, str]:
    module_name, function_name = spec.split(":")
    return module_name, function_name


def keyword_arguments(function: Callable, **offered) -> dict:
    """The arguments of ARGUMENTS the chief offers, each only if the function takes it."""
    accepted = inspect.signature(function).parameters
    return {name: value for name, value in offered.items() if name in accepted}


def load(spec: str, *, field: str = FIELD, returning: str = "a tf_keras model") -> Callable:
    """The function `spec` names (in option `field`: a model's, or a dataset's); raises UserError (one line) when
    the module or the function is not there."""
    module_name, function_name = split(spec)
    problem = _module_problem(spec, module_name, field)
    if problem:
        raise UserError(problem)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any error in the user's module is the user's to fix
        raise UserError(_problem(spec, f"module {module_name} fails to import ({type(error).__name__}: "
                                       f"{error})", "fix that module so `import` succeeds", field)) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UserError(_problem(spec, f"module {module_name} ({module.__file__}) has no function "
                                       f"{function_name}", f"name a function of that module that returns {returning}",
                                 field))
    return function


def problems(spec: str) -> list[Problem]:
    """What stops the chief from building the model `spec` names: the module, the function or its parameters."""
    try:
        function = load(spec)
    except UserError as error:
        return error.problems
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return []  # a builtin without a signature: the chief will find out
    needed = [name for name, parameter in signature.parameters.items()
              if parameter.default is inspect.Parameter.empty and name not in ARGUMENTS
              and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if needed:
        return [_problem(spec, f"requires {', '.join(needed)}, but the chief passes only {', '.join(ARGUMENTS)} "
                               "(each if the function takes it)",
                         f"give the other parameters defaults, or take some of {', '.join(ARGUMENTS)}")]
    return []


def _module_problem(spec: str, module_name: str, field: str) -> Problem | None:
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as error:  # a parent package is missing or broken
        found, detail = None, f" ({type(error).__name__}: {error})"
    else:
        detail = ""
    if found is None:
        return _problem(spec, f"module {module_name} is not importable from the project directory{detail}",
                        "put it (a .py file or package) in the project directory or on PYTHONPATH, or fix the name",
                        field)
    return None


def _problem(spec: str, problem: str, fix: str, field: str = FIELD) -> Problem:
    return Problem(field, spec, problem, fix)


if __name__ == "__main__":
    print(json.dumps([problem.text() for problem in problems(sys.argv[1])]))
