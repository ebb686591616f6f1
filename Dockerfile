# shadowguard proxy image: `docker build -t shadowguard .` then
#   docker run -v $PWD/shadowguard.yaml:/etc/shadowguard/shadowguard.yaml:ro -v sg-data:/var/lib/shadowguard \
#     -p 8790:8790 shadowguard
# The config is a mount (/etc/shadowguard/shadowguard.yaml, or another path in SHADOWGUARD_CONFIG); every key
# can be overridden with SHADOWGUARD_* variables (proxy/config.py). The approval queue and the session ledger
# default to SQLite files in the /var/lib/shadowguard volume; SHADOWGUARD_APPROVALS__STORE=redis://... (or
# postgresql://...) shares them between replicas. docs/deploy.md describes the image and the Helm chart.

FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml constraints.txt README.md ./
COPY guard ./guard
COPY proxy ./proxy
COPY benchmark ./benchmark
COPY docker/install.sh ./docker/install.sh
# Runtime dependencies only: the dev extra (pytest, ruff, mypy, playwright...) is never installed.
RUN sh docker/install.sh /opt/shadowguard /src

FROM python:3.11-slim
RUN groupadd --system --gid 10001 shadowguard \
 && useradd --system --uid 10001 --gid shadowguard --home-dir /var/lib/shadowguard --shell /usr/sbin/nologin shadowguard \
 && mkdir -p /etc/shadowguard /var/lib/shadowguard \
 && chown shadowguard:shadowguard /var/lib/shadowguard
COPY --from=build /opt/shadowguard /opt/shadowguard
COPY policies /opt/shadowguard/policies
ENV PATH=/opt/shadowguard/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    SHADOWGUARD_CONFIG=/etc/shadowguard/shadowguard.yaml \
    SHADOWGUARD_HTTP__HOST=0.0.0.0 \
    SHADOWGUARD_HTTP__PORT=8790 \
    SHADOWGUARD_APPROVALS__STORE=sqlite:////var/lib/shadowguard/approvals.db \
    SHADOWGUARD_SESSIONS__STORE=sqlite:////var/lib/shadowguard/sessions.db
VOLUME ["/var/lib/shadowguard"]
WORKDIR /var/lib/shadowguard
USER 10001:10001
EXPOSE 8790
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SHADOWGUARD_HTTP__PORT', '8790'), timeout=4)"
CMD ["sh", "-c", "exec shadowguard serve --config \"$SHADOWGUARD_CONFIG\""]
