"""Import ``openenv``'s server and client classes without its Gradio web interface.

``openenv.core.env_server`` imports its optional web UI (Gradio, ~15 s to import) when Gradio is
installed, and skips it when the import raises ``ModuleNotFoundError``. This server has no web UI, so
unless Gradio is already loaded in the process, it is marked absent before ``openenv`` is imported.
"""

from __future__ import annotations

import sys

if "gradio" not in sys.modules:
    sys.modules["gradio"] = None  # type: ignore[assignment]

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import Action, Environment, HTTPEnvServer, Observation, State

__all__ = ["Action", "EnvClient", "Environment", "HTTPEnvServer", "Observation", "State", "StepResult"]
