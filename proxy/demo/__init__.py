"""The quickstart demo: a tiny accounts app as a real MCP tool server, a config, and a scripted agent.

* ``python -m proxy.demo.server`` - the accounts app over stdio (SQLite through SQLAlchemy); it takes
  part in the guard's transaction extension, so the proxy runs an agent's writes in a shadow
  transaction on its database.
* ``proxy/demo/shadowguard.yaml`` - the proxy config pointing at it, with ``policies/example``.
* ``python -m proxy.demo.client`` - a scripted agent that talks to the running proxy over HTTP.
* ``python -m proxy.demo`` (``make demo``) - starts the proxy, waits until it is ready, runs the client,
  stops the proxy.
"""

__all__: list[str] = []
