FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN SECRET_KEY=build python manage.py collectstatic --noinput -v0
EXPOSE 8000
CMD ["uvicorn", "platform_site.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
