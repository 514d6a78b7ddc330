FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STATIC_ROOT=/app/staticfiles AGENTRY_VAR_DIR=/var/lib/agentry
WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt
# The code stays root's and read-only to the processes; .dockerignore keeps secrets (.env), the
# local virtualenv, data and tests out of the image.
COPY . .
# Static files live in the image and are served at run time by the web process itself
# (WhiteNoise), not from the data volume. The build-time key signs nothing: it only lets
# settings load.
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput -v0
# The processes run unprivileged, as a numeric user so that a runtime refusing root can tell;
# the data volume mounted on /var/lib/agentry inherits this owner.
RUN groupadd --gid 10001 agentry \
    && useradd --uid 10001 --gid agentry --no-create-home --home-dir /var/lib/agentry \
       --shell /usr/sbin/nologin --no-log-init agentry \
    && mkdir -p /var/lib/agentry && chown -R agentry:agentry /var/lib/agentry
USER 10001:10001
EXPOSE 8000
CMD ["uvicorn", "platform_site.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
