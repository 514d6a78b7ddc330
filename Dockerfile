FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    STATIC_ROOT=/app/staticfiles AGENTRY_VAR_DIR=/var/lib/agentry
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# Static files live in the image (served by WhiteNoise), not in the data volume. The build-time
# key signs nothing: it only lets settings load.
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput -v0
# The processes run unprivileged; the data volume mounted on /var/lib/agentry inherits this owner.
RUN useradd --system --home-dir /var/lib/agentry agentry \
    && mkdir -p /var/lib/agentry && chown -R agentry:agentry /var/lib/agentry
USER agentry
EXPOSE 8000
CMD ["uvicorn", "platform_site.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
