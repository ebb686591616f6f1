"""A real LLM on any OpenAI-compatible endpoint: the agent, the simulated user and the rubric judge.

* :mod:`benchmark.llm.config` — the roles' endpoints (``--llm-config FILE``); API keys by variable name.
* :mod:`benchmark.llm.client` — ``ChatClient``: the ``openai`` client with tenacity retries;
  ``EndpointError`` when the endpoint fails (a system error row, never a task failure).
* :mod:`benchmark.llm.agent` — ``LlmAgent`` (``--agent llm``): the reference's agent–user loop.
* :mod:`benchmark.llm.user` — ``UserSimulator.reply(task, transcript) -> str``.
* :mod:`benchmark.llm.judge` — ``RubricJudge.grade(task, final_response) -> RubricGrade``.
* :mod:`benchmark.llm.proxied` — ``--through-proxy``: the agent's calls through ``shadowguard serve``.
* :mod:`benchmark.llm.stub` — ``shadowguard bench stub-llm``, the scripted test double.

Reuse outside a campaign (e.g. an OpenEnv server)::

    from benchmark.llm.client import ChatClient, UsageMeter
    from benchmark.llm.config import load_llm_config
    from benchmark.llm.judge import RubricJudge
    from benchmark.llm.user import UserSimulator

    config = load_llm_config("llm.yaml")
    user = UserSimulator(ChatClient(config.user, "user"))        # config.user is None: no user role
    judge = RubricJudge(ChatClient(config.judge, "judge"))       # config.judge is None: not graded
    meter = UsageMeter()                                          # tokens per role, optional
    text = user.reply(task, messages, meter)                      # messages: results.Message list
    grade = judge.grade(task, final_text, meter)                  # grade.passed, grade.answers
"""

__all__: list[str] = []  # the public names live in the submodules listed above
