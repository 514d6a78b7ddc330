"""Imported once by the sandbox's fork server (tools/executors/sandbox.py), so that each child
it forks starts with Django set up and the registered tools imported."""

import gc

import django

django.setup()

import tools.executors.sandbox  # noqa: E402, F401 (needs the app registry ready; children unpickle its _child)
from tools.registry import registry  # noqa: E402

registry.load_modules()

# Children would otherwise copy most of these pages when their garbage collector walks the
# imported objects (copy-on-write); frozen objects are never walked.
gc.collect()
gc.freeze()
