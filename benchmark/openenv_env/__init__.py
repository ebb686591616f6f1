"""The guarded benchmark behind the OpenEnv interface (``shadowguard env openenv``).

The 507 ThinkingBox-Bench tasks on our environments, served with the ``openenv`` package's server
classes under ThinkingBox's OpenEnv contract (actions, observations, state, binary terminal reward),
with the guard in each episode's path. See docs/openenv.md.
"""

__all__: list[str] = []  # the public names live in its submodules (cli, client, hooks, models)
