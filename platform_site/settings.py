"""Settings read from the environment.

With no environment at all Agentry runs on embedded defaults (a SQLite file and kombu's
filesystem broker under ./var) so a newcomer needs no server; production sets DATABASE_URL,
REDIS_URL (or CELERY_BROKER_URL for RabbitMQ), SECRET_KEY and AGENTRY_ENCRYPTION_KEYS. Variables
the environment leaves unset are read from a .env file, if there is one (.env.example lists them all).
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv
from kombu import Queue

BASE_DIR = Path(__file__).resolve().parent.parent
# The .env beside manage.py fills in what the environment leaves unset (the environment always
# wins), so the web, the workers and manage.py read one file without a wrapper that exports it.
# AGENTRY_ENV_FILE names another file, which must then exist, or none when empty.
_ENV_FILE = os.environ.get("AGENTRY_ENV_FILE")
if _ENV_FILE is None:
    load_dotenv(BASE_DIR / ".env", override=False)
elif _ENV_FILE:
    if not Path(_ENV_FILE).is_file():
        raise ImproperlyConfigured(f"AGENTRY_ENV_FILE names {_ENV_FILE}, which is not a file.")
    load_dotenv(_ENV_FILE, override=False)
VAR_DIR = Path(os.environ.get("AGENTRY_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "dev-only-insecure-secret-key-change-me")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# Outside debug, session and CSRF cookies travel over HTTPS only and browsers are told to keep
# to HTTPS (HSTS; ignored on plain HTTP, so the embedded setup on 127.0.0.1 still works).
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "0" if DEBUG else "31536000"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
# Preloading is a request to browser vendors that is slow to undo: the operator opts in.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
# Redirecting to HTTPS needs TLS in front of the web (the compose stack assumes a proxy there);
# off by default so the embedded setup and the test servers answer on plain http://127.0.0.1.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^health/$"]  # probes from inside the private network speak HTTP
# Over plain HTTP those cookies are dropped: the CSRF failure page then says why, in the
# operator's language, and what to change (the login page warns before).
CSRF_FAILURE_VIEW = "platform_site.plain_http.csrf_failure"
# Only behind a proxy that sets this header itself (and drops the client's): otherwise any
# client could claim HTTPS.
if env_bool("AGENTRY_TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Fernet keys, newest first; older keys stay to decrypt rows written before a rotation.
# Without one, a key is derived from SECRET_KEY so the embedded setup works out of the box;
# `check --deploy` refuses that (rotating SECRET_KEY would lose every stored secret).
AGENTRY_ENCRYPTION_KEYS = env_list("AGENTRY_ENCRYPTION_KEYS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # Below every app whose objects belong to a workspace.
    "workspaces",
    "agents",
    "tools",
    "conversations",
    "knowledge",
    "memory",
    "engine",
    "alerts",
    "evals",
    "triggers",
    "widgets",
    "notifications",
    # Agents over Google's A2A protocol (its transport is api.a2a).
    "a2a_server",
    # Chat-app bots: a chat message starts a run through admission, like a hook.
    "chatbots",
    # People's reviews of production runs, above the evaluations a review's case joins.
    "reviews",
    # Above the ledger it links to (messages, runs) and the registries it joins.
    "attachments",
    # Its admin wraps the audited models' admins, so it comes after the apps that register them.
    "audit",
    "api",
    "console",
    # The demos and their terminal commands: the top layer, which nothing imports.
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "platform_site.logs.RequestLogContextMiddleware",
    # A caller's W3C traceparent becomes the parent of the runs its request creates.
    "platform_site.telemetry.TraceContextMiddleware",
    # Serves the admin's and the pages' static files from the ASGI process itself; the async
    # variant keeps the whole chain async, so a waiting request holds no thread.
    "platform_site.middleware.AsyncWhiteNoiseMiddleware",
    "platform_site.middleware.SessionMiddleware",
    # After sessions (the switcher's choice is stored there), before common: pages and API
    # errors follow the choice, then the browser's Accept-Language, then LANGUAGE_CODE.
    "platform_site.middleware.LocaleMiddleware",
    "platform_site.middleware.CommonMiddleware",
    # Before CSRF: a wrong method gets a JSON 405, not the HTML "CSRF verification failed" page.
    "platform_site.middleware.MethodNotAllowedMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "platform_site.middleware.AuthenticationMiddleware",
    # The workspace a signed-in person acts in (the header switcher's choice, kept in the session).
    "workspaces.middleware.CurrentWorkspaceMiddleware",
    "platform_site.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "platform_site.unavailable.DependencyUnavailableMiddleware",
    # A limit reached below a view outside DRF (a chat completion's admission): a 429.
    "platform_site.refusals.LimitReachedMiddleware",
    # Where a request's configuration changes come from (admin, API, operator pages), for the audit.
    "audit.middleware.ConfigAuditMiddleware",
]

ROOT_URLCONF = "platform_site.urls"
WSGI_APPLICATION = "platform_site.wsgi.application"
ASGI_APPLICATION = "platform_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "platform_site.plain_http.login_context",
                "workspaces.sso.login_context",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        # An empty DATABASE_URL counts as unset, so `DATABASE_URL= manage.py …` runs on the embedded file.
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'agentry.sqlite3'}",
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "60")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, with waits a worker's engine loop makes cooperatively (see the module).
    DATABASES["default"]["ENGINE"] = "platform_site.postgresql"
if DATABASES["default"]["ENGINE"] == "platform_site.postgresql" and env_bool("AGENTRY_DB_POOL", True):
    # A pool per process (psycopg_pool): worker threads borrow a connection for each database
    # step and hand it back while they wait on a model, so a few connections serve hundreds of
    # runs in flight. Pooled connections replace Django's persistent ones.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": int(os.environ.get("AGENTRY_DB_POOL_MIN_SIZE", "2")),
        "max_size": int(os.environ.get("AGENTRY_DB_POOL_MAX_SIZE", "20")),
        # How long a request waits for a connection before it fails (a JSON 503 on the API):
        # while PostgreSQL is down, every request waits this long, so it stays short.
        "timeout": float(os.environ.get("AGENTRY_DB_POOL_TIMEOUT", "5")),
    }
if DATABASES["default"]["ENGINE"] == "platform_site.postgresql" and env_bool("AGENTRY_DB_PREPARE", True):
    # Parameters sent apart from the statement (server-side binding), so that a statement a
    # connection sends again is prepared (from its second time) and PostgreSQL stops planning it:
    # planning was the larger part of PostgreSQL's CPU for a run (6 ms of 13 per run, measured
    # with pg_stat_statements). Off behind a pooler that cannot keep prepared statements
    # (PgBouncer in transaction mode before 1.21).
    DATABASES["default"].setdefault("OPTIONS", {})["server_side_binding"] = True
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 1
# PostgreSQL: the step commits that nothing outside the database waits on (a run's claim, a
# model's answer, a tool's result) commit asynchronously, flushed by the next synchronous commit,
# which every model request, side-effecting tool and run end still makes first
# (conversations.batch). Off: every commit waits for its flush to disk.
AGENTRY_DB_ASYNC_COMMIT = env_bool("AGENTRY_DB_ASYNC_COMMIT", True)
# PostgreSQL gets JSON values encoded by orjson (platform_site.postgresql.jsonb), which accepts a
# few types the standard encoder refuses; the test settings turn this on so that every value is
# also checked by json.dumps, as SQLite's encoding would.
AGENTRY_JSON_STANDARD_CHECK = False
if DATABASES["default"]["ENGINE"] == "platform_site.postgresql":
    # An unreachable server fails the connection attempt after this long instead of the
    # operating system's TCP timeout (minutes).
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = int(
        os.environ.get("AGENTRY_DB_CONNECT_TIMEOUT", "3")
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker and beat share one file: WAL lets readers run beside the writer, and
    # IMMEDIATE transactions queue writers on the busy timeout instead of failing at once.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Roles first: a workspace member's role answers for the workspace the request acts in, and a
# token's narrower ceiling refuses before the person's own Django permissions are asked.
AUTHENTICATION_BACKENDS = [
    "workspaces.access.WorkspaceRoleBackend",
    # Single sign-on's callback (answers nothing until AGENTRY_OIDC_* configure a provider).
    "workspaces.sso.SignOnBackend",
    "django.contrib.auth.backends.ModelBackend",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
# The interface's languages (the switcher lists these) and an agent's language choices.
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# Times with seconds in the admin (console/formats).
FORMAT_MODULE_PATH = ["console.formats"]
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "static"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- Attachments: images, files and audio sent with messages (docs/attachments.md) ------------
# Their bytes: under AGENTRY_VAR_DIR/attachments, or in an S3-compatible bucket when
# AGENTRY_ATTACHMENTS_S3_BUCKET is set (django-storages; the other variables are optional: an
# endpoint for MinIO, Ceph, R2 and the like, a region, keys when not from the environment's
# usual AWS credentials, a key prefix, "path" addressing for servers without virtual hosts).
AGENTRY_ATTACHMENTS_S3_BUCKET = os.environ.get("AGENTRY_ATTACHMENTS_S3_BUCKET", "")
if AGENTRY_ATTACHMENTS_S3_BUCKET:
    STORAGES["attachments"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": AGENTRY_ATTACHMENTS_S3_BUCKET,
            "endpoint_url": os.environ.get("AGENTRY_ATTACHMENTS_S3_ENDPOINT_URL") or None,
            "region_name": os.environ.get("AGENTRY_ATTACHMENTS_S3_REGION") or None,
            "access_key": os.environ.get("AGENTRY_ATTACHMENTS_S3_ACCESS_KEY_ID") or None,
            "secret_key": os.environ.get("AGENTRY_ATTACHMENTS_S3_SECRET_ACCESS_KEY") or None,
            "location": os.environ.get("AGENTRY_ATTACHMENTS_S3_PREFIX", "attachments"),
            "addressing_style": os.environ.get("AGENTRY_ATTACHMENTS_S3_ADDRESSING_STYLE") or None,
            # Private objects, downloaded through Agentry's own gated view, never by a signed URL.
            "default_acl": None,
            "querystring_auth": False,
            "file_overwrite": False,
        },
    }
else:
    STORAGES["attachments"] = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(VAR_DIR / "attachments"), "base_url": None},
    }
# One attachment's bytes (before an image is re-encoded, and after).
AGENTRY_ATTACHMENT_MAX_BYTES = int(os.environ.get("AGENTRY_ATTACHMENT_MAX_BYTES", str(20 * 1000 * 1000)))
# An image's pixels, all frames together: checked on its header, before it is decoded.
AGENTRY_ATTACHMENT_MAX_PIXELS = int(os.environ.get("AGENTRY_ATTACHMENT_MAX_PIXELS", str(25 * 1000 * 1000)))
AGENTRY_ATTACHMENTS_PER_MESSAGE = int(os.environ.get("AGENTRY_ATTACHMENTS_PER_MESSAGE", "10"))
# A workspace's attachments together, unless the workspace sets its own (Workspace.attachment_bytes_limit).
AGENTRY_ATTACHMENT_WORKSPACE_BYTES = int(
    os.environ.get("AGENTRY_ATTACHMENT_WORKSPACE_BYTES", str(5 * 1000 * 1000 * 1000))
)
# An attachment no message uses is deleted by the daily sweep once this old (an upload never
# sent, or one whose messages the retention policy purged).
AGENTRY_ATTACHMENT_UNUSED_HOURS = float(os.environ.get("AGENTRY_ATTACHMENT_UNUSED_HOURS", "24"))
# An image a /v1 request names by an http(s) URL is fetched through the outbound guard: public
# addresses only, unless its host is listed here (kept apart from the tools' list, so that a host
# allowed for tools is not opened to every API client), within this many seconds for all the
# request's URLs together.
AGENTRY_ATTACHMENT_URL_ALLOWLIST = env_list("AGENTRY_ATTACHMENT_URL_ALLOWLIST")
AGENTRY_ATTACHMENT_FETCH_SECONDS = float(os.environ.get("AGENTRY_ATTACHMENT_FETCH_SECONDS", "10"))
if AGENTRY_ATTACHMENT_FETCH_SECONDS <= 0:
    raise ImproperlyConfigured("AGENTRY_ATTACHMENT_FETCH_SECONDS must be above 0.")
for _name in ("AGENTRY_ATTACHMENT_MAX_BYTES", "AGENTRY_ATTACHMENT_MAX_PIXELS", "AGENTRY_ATTACHMENTS_PER_MESSAGE"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1.")

LOGIN_URL = "/admin/login/"

# --- Single sign-on (OpenID Connect, authorization code with PKCE; docs/sso.md) ---------------
# The provider: its issuer (endpoints read from its discovery document), or each endpoint given
# (an endpoint given wins over the discovered one). Unset client id: no single sign-on.
AGENTRY_OIDC_ISSUER = os.environ.get("AGENTRY_OIDC_ISSUER", "").rstrip("/")
AGENTRY_OIDC_AUTHORIZATION_ENDPOINT = os.environ.get("AGENTRY_OIDC_AUTHORIZATION_ENDPOINT", "")
AGENTRY_OIDC_TOKEN_ENDPOINT = os.environ.get("AGENTRY_OIDC_TOKEN_ENDPOINT", "")
AGENTRY_OIDC_USERINFO_ENDPOINT = os.environ.get("AGENTRY_OIDC_USERINFO_ENDPOINT", "")
AGENTRY_OIDC_JWKS_URI = os.environ.get("AGENTRY_OIDC_JWKS_URI", "")
AGENTRY_OIDC_END_SESSION_ENDPOINT = os.environ.get("AGENTRY_OIDC_END_SESSION_ENDPOINT", "")
AGENTRY_OIDC_CLIENT_ID = os.environ.get("AGENTRY_OIDC_CLIENT_ID", "")
AGENTRY_OIDC_CLIENT_SECRET = os.environ.get("AGENTRY_OIDC_CLIENT_SECRET", "")
AGENTRY_OIDC_SCOPES = os.environ.get("AGENTRY_OIDC_SCOPES", "openid email profile")
AGENTRY_OIDC_SIGN_ALGO = os.environ.get("AGENTRY_OIDC_SIGN_ALGO", "RS256")
# The login page's button: "Sign in with <name>".
AGENTRY_OIDC_PROVIDER_NAME = os.environ.get("AGENTRY_OIDC_PROVIDER_NAME", "single sign-on")
# The claim that lists a person's groups, and which group gives which workspace and role:
# "group=workspace-slug:role,..." (workspaces.sso.role_map_parse).
AGENTRY_OIDC_GROUPS_CLAIM = os.environ.get("AGENTRY_OIDC_GROUPS_CLAIM", "groups")
AGENTRY_OIDC_ROLE_MAP = os.environ.get("AGENTRY_OIDC_ROLE_MAP", "")
# Off: only single sign-on signs in; the password form is gone and a password is refused.
AGENTRY_LOCAL_LOGIN = env_bool("AGENTRY_LOCAL_LOGIN", True)
# mozilla-django-oidc's own settings; the provider's are read through workspaces.sso.
OIDC_USE_PKCE = True
OIDC_STORE_ID_TOKEN = True  # the logout's id_token_hint
OIDC_TIMEOUT = float(os.environ.get("AGENTRY_OIDC_TIMEOUT_SECONDS", "10"))
OIDC_OP_LOGOUT_URL_METHOD = "workspaces.sso.provider_logout_url"

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "platform_site.api_errors.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agentry API",
    "VERSION": "1.0.0",
    # Several models have a `status`; name each choice set after its model in the schema.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "conversations.models.RunStatus",
        "ApprovalStatusEnum": "conversations.models.Approval.Status",
        "ToolInvocationStatusEnum": "conversations.models.ToolInvocation.Status",
        "LLMCallStatusEnum": "conversations.models.LLMCall.Status",
        "EvalRunStatusEnum": "evals.models.EvalRunStatus",
        "AttachmentKindEnum": "attachments.models.AttachmentKind",
    },
}

# --- Celery -------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
# Redis or RabbitMQ. Unset or empty, the broker is REDIS_URL's server, and without one kombu's
# filesystem broker (the embedded setup). Redis stays the cache either way.
# The filesystem transport ignores the host; naming one keeps kombu from warning that none was given.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL or "filesystem://localhost/"
_BROKER_SCHEME = CELERY_BROKER_URL.partition("://")[0].lower()
AGENTRY_BROKER_KIND = {
    "filesystem": "filesystem",
    "redis": "redis",
    "rediss": "redis",
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
    "pyamqp": "rabbitmq",
}.get(_BROKER_SCHEME)
if AGENTRY_BROKER_KIND is None:
    raise ImproperlyConfigured("CELERY_BROKER_URL must be a redis://, rediss://, amqp:// or amqps:// URL.")
# filesystem://: kombu's transport, with message files that appear whole (platform_site.fs_broker);
# otherwise the URL's scheme chooses kombu's transport.
CELERY_BROKER_TRANSPORT = {"filesystem": "platform_site.fs_broker:Transport"}.get(_BROKER_SCHEME)
if AGENTRY_BROKER_KIND == "filesystem":
    _broker_dir = VAR_DIR / "broker"
    (_broker_dir / "out").mkdir(parents=True, exist_ok=True)
    (_broker_dir / "processed").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        # Exchange tables (the workers' control/ping fanout) live beside the queues, not in the cwd.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
else:
    # Redis's visibility timeout is set below, from the longest a message stays unacknowledged.
    # RabbitMQ takes no option: publisher confirms would make a request wait without a bound
    # while the broker blocks publishers (a memory or disk alarm), and a message lost before it
    # is stored costs a run only the sweeper's re-enqueue (AGENTRY_QUEUED_REENQUEUE_SECONDS).
    CELERY_BROKER_TRANSPORT_OPTIONS = {}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
# A step task may be delivered again after a worker dies: steps resume from the database and
# completed calls are never repeated, so late acknowledgement is safe and loses nothing.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A request that enqueues after commit gives up on an unreachable broker after about this long
# (the run stays queued and the sweeper sends it again), instead of hanging on TCP.
CELERY_BROKER_CONNECTION_TIMEOUT = float(os.environ.get("CELERY_BROKER_CONNECTION_TIMEOUT", "2"))
CELERY_TASK_DEFAULT_QUEUE = "llm"
CELERY_TASK_QUEUES = (Queue("llm"), Queue("maintenance"))
# Tasks are routed and scheduled by their names, each its module's path (engine.tasks also
# registers three under the names they had before: messages already queued carry those).
CELERY_TASK_ROUTES = {
    "engine.tasks.run_advance_task": {"queue": "llm"},
    "engine.tasks.runs_sweep_task": {"queue": "maintenance"},
}
CELERY_BEAT_SCHEDULE = {
    "sweep-runs": {"task": "engine.tasks.runs_sweep_task", "schedule": 15.0},
}
# --- Approvals: overdue approvals expire on this beat; the queue page polls at this pace.
CELERY_TASK_ROUTES["engine.tasks.approvals_expire_task"] = {"queue": "maintenance"}
CELERY_BEAT_SCHEDULE["expire-approvals"] = {
    "task": "engine.tasks.approvals_expire_task",
    "schedule": float(os.environ.get("AGENTRY_APPROVAL_EXPIRY_INTERVAL_SECONDS", "30")),
}
AGENTRY_APPROVALS_POLL_SECONDS = float(os.environ.get("AGENTRY_APPROVALS_POLL_SECONDS", "5"))
# --- Alerts (alerts/): every enabled rule is measured on this beat; emails go through Django's
# email backend (SMTP at EMAIL_HOST:EMAIL_PORT, from DEFAULT_FROM_EMAIL).
CELERY_TASK_ROUTES["alerts.tasks.alert_rules_evaluate_task"] = {"queue": "maintenance"}
CELERY_BEAT_SCHEDULE["evaluate-alerts"] = {
    "task": "alerts.tasks.alert_rules_evaluate_task",
    "schedule": float(os.environ.get("AGENTRY_ALERT_EVALUATE_SECONDS", "60")),
}
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "agentry@localhost")
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# --- Retention (engine/retention.py): agents' retention policies are applied daily, with the
# expiry of finished webhook deliveries; idempotency keys expire on an hourly beat of their own.
AGENTRY_IDEMPOTENCY_KEY_HOURS = float(os.environ.get("AGENTRY_IDEMPOTENCY_KEY_HOURS", "24"))
AGENTRY_WEBHOOK_DELIVERY_DAYS = float(os.environ.get("AGENTRY_WEBHOOK_DELIVERY_DAYS", "30"))
# After each batch of 200 runs, the purge rests this many times as long as the batch took, so
# its deletes take at most half of a database core from live runs (0: no rest).
AGENTRY_RETENTION_PAUSE = float(os.environ.get("AGENTRY_RETENTION_PAUSE", "1.0"))
CELERY_TASK_ROUTES["engine.tasks.retention_sweep_task"] = {"queue": "maintenance"}
CELERY_TASK_ROUTES["engine.tasks.idempotency_keys_expire_task"] = {"queue": "maintenance"}
# A completed run's long-term memory extraction (engine/memory.py): a model call after the run.
CELERY_TASK_ROUTES["engine.tasks.memory_extract_task"] = {"queue": "maintenance"}
CELERY_BEAT_SCHEDULE["retention-sweep"] = {"task": "engine.tasks.retention_sweep_task", "schedule": 24 * 3600.0}
CELERY_BEAT_SCHEDULE["expire-idempotency-keys"] = {
    "task": "engine.tasks.idempotency_keys_expire_task",
    "schedule": 3600.0,
}
# --- Triggers (triggers/): beat's tick fires the agents' schedules that are due (the tick is the
# finest a schedule can be; a cron expression's minute is fired within one tick of it).
AGENTRY_SCHEDULE_TICK_SECONDS = float(os.environ.get("AGENTRY_SCHEDULE_TICK_SECONDS", "15"))
CELERY_TASK_ROUTES["triggers.tasks.schedules_tick_task"] = {"queue": "maintenance"}
CELERY_BEAT_SCHEDULE["schedules-tick"] = {
    "task": "triggers.tasks.schedules_tick_task",
    "schedule": AGENTRY_SCHEDULE_TICK_SECONDS,
}
# An inbound hook refuses a request signed longer ago than this (a replayed capture).
AGENTRY_HOOK_TOLERANCE_SECONDS = int(os.environ.get("AGENTRY_HOOK_TOLERANCE_SECONDS", "300"))
# Signed requests per hook and minute (each starts a run); empty: no limit.
AGENTRY_HOOK_RATE = os.environ.get("AGENTRY_HOOK_RATE", "120/min")
# Requests to hooks refused before a signature held, per client address and minute; empty: no limit.
AGENTRY_HOOK_FAILURE_RATE = os.environ.get("AGENTRY_HOOK_FAILURE_RATE", "60/min")
# The address people open Agentry at (https://agentry.example.com): links in chat-app messages
# (an approval's page) are made absolute with it; empty, those messages carry no link.
AGENTRY_PUBLIC_URL = os.environ.get("AGENTRY_PUBLIC_URL", "").rstrip("/")
# Requests per chat widget and minute, all its end users together (empty: no limit).
AGENTRY_WIDGET_RATE = os.environ.get("AGENTRY_WIDGET_RATE", "600/min")

# --- Agentry ------------------------------------------------------------------------------
# Python modules whose @python_tool functions form the registry of built-in tools.
# The demo's tools moved from tools.builtin.demo to the demo app: a deployment's .env that still
# names the old module keeps registering them.
AGENTRY_TOOL_MODULES = [
    {"tools.builtin.demo": "demo.tools"}.get(module, module)
    for module in env_list("AGENTRY_TOOL_MODULES", "demo.tools,tools.builtin.common")
]
# Hosts (or host:port) that tools may reach although they resolve to loopback, private,
# link-local or other internal addresses; everything else a tool calls must be public.
AGENTRY_OUTBOUND_ALLOWLIST = env_list("AGENTRY_OUTBOUND_ALLOWLIST")
# The same for webhook receivers, kept apart so that allowing an internal receiver does not
# let tools (steered by a model) reach it too. Unset, it is the tools' allowlist.
AGENTRY_WEBHOOK_ALLOWLIST = env_list("AGENTRY_WEBHOOK_ALLOWLIST", os.environ.get("AGENTRY_OUTBOUND_ALLOWLIST", ""))
# Memory a sandboxed python tool (e.g. the calculator) may use beyond what its process
# starts with; it also gets CPU time up to its timeout, and is killed at the timeout.
AGENTRY_SANDBOX_MEMORY_MB = int(os.environ.get("AGENTRY_SANDBOX_MEMORY_MB", "256"))
# A worker renews the lease of each run it holds; a run whose lease lapsed is recovered.
AGENTRY_RUN_LEASE_SECONDS = int(os.environ.get("AGENTRY_RUN_LEASE_SECONDS", "60"))
AGENTRY_RUN_MAX_RECOVERIES = int(os.environ.get("AGENTRY_RUN_MAX_RECOVERIES", "3"))
# A queued run whose task went missing (broker lost it) is enqueued again after this long.
AGENTRY_QUEUED_REENQUEUE_SECONDS = int(os.environ.get("AGENTRY_QUEUED_REENQUEUE_SECONDS", "120"))
# A model call made outside a run's lease (a memory extraction, an eval judge) has this long:
# its connect and read timeouts are capped to it, so the sweeper takes one still started after
# twice this for a call whose worker is gone, and closes it.
AGENTRY_MODEL_CALL_MAX_SECONDS = int(os.environ.get("AGENTRY_MODEL_CALL_MAX_SECONDS", "300"))

# Worker processes carry every run they advance on one event loop (engine.reactor); off, each
# Celery thread advances its run itself (kept to compare the two in the benchmark).
AGENTRY_ENGINE_LOOP = env_bool("AGENTRY_ENGINE_LOOP", True)
# One task advances a run for at most this long, then requeues it between steps.
AGENTRY_TASK_SLICE_SECONDS = float(os.environ.get("AGENTRY_TASK_SLICE_SECONDS", "600"))
# Agents as tools: how many levels of delegated runs one request may start below itself.
AGENTRY_DELEGATION_MAX_DEPTH = int(os.environ.get("AGENTRY_DELEGATION_MAX_DEPTH", "3"))
# Celery's own limits, for pools that enforce them (prefork, gevent; not threads): a slice plus
# the longest model call fits under the soft limit.
CELERY_TASK_SOFT_TIME_LIMIT = int(os.environ.get("CELERY_TASK_SOFT_TIME_LIMIT", "1200"))
CELERY_TASK_TIME_LIMIT = int(os.environ.get("CELERY_TASK_TIME_LIMIT", "1260"))

# Model-call retries: exponential backoff with jitter, Retry-After honoured up to the cap.
AGENTRY_RETRY_BASE_SECONDS = float(os.environ.get("AGENTRY_RETRY_BASE_SECONDS", "0.5"))
AGENTRY_RETRY_MAX_SECONDS = float(os.environ.get("AGENTRY_RETRY_MAX_SECONDS", "30"))

# --- API: limits, throttling, live events, webhooks ------------------------------------------
# Requests served by Django's handler at once in one web process (platform_site.asgi); the
# others wait on the event loop, holding no thread or connection. Below the pool's size, so a
# burst of requests queues on the loop rather than in threads waiting for a connection.
AGENTRY_WEB_REQUEST_THREADS = int(os.environ.get("AGENTRY_WEB_REQUEST_THREADS", "8"))
if AGENTRY_WEB_REQUEST_THREADS < 1:
    raise ImproperlyConfigured("AGENTRY_WEB_REQUEST_THREADS must be at least 1.")
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("AGENTRY_MAX_REQUEST_BYTES", str(1024 * 1024)))
# Any request's body, counted by the web server's application as it arrives, before any
# authentication (platform_site.body_limit): 413 once past it, at once for a Content-Length
# above it. AGENTRY_MAX_REQUEST_BYTES above limits what Django parses of a body's form or JSON.
AGENTRY_MAX_BODY_BYTES = int(
    os.environ.get("AGENTRY_MAX_BODY_BYTES", str(max(4 * 1024 * 1024, DATA_UPLOAD_MAX_MEMORY_SIZE)))
)
if AGENTRY_MAX_BODY_BYTES < 1:
    raise ImproperlyConfigured("AGENTRY_MAX_BODY_BYTES must be at least 1.")
# How long a request may take to send its body: a client trickling a byte now and then would
# otherwise hold its connection and buffered body for ever (408 once passed).
AGENTRY_BODY_TIMEOUT_SECONDS = float(os.environ.get("AGENTRY_BODY_TIMEOUT_SECONDS", "120"))
if AGENTRY_BODY_TIMEOUT_SECONDS <= 0:
    raise ImproperlyConfigured("AGENTRY_BODY_TIMEOUT_SECONDS must be above 0.")
AGENTRY_MESSAGE_MAX_CHARS = int(os.environ.get("AGENTRY_MESSAGE_MAX_CHARS", "32000"))
# Per user: every API request, and requests that start a run (messages, chat completions).
AGENTRY_API_RATE = os.environ.get("AGENTRY_API_RATE", "1200/min")
AGENTRY_API_RUN_RATE = os.environ.get("AGENTRY_API_RUN_RATE", "120/min")
REST_FRAMEWORK.update(
    {
        "DEFAULT_PARSER_CLASSES": [
            "api.parsers.LimitedJSONParser",
            "rest_framework.parsers.FormParser",
            "rest_framework.parsers.MultiPartParser",
        ],
        "DEFAULT_THROTTLE_CLASSES": ["api.throttles.ApiUserThrottle"],
        # The proxies in front of the site that append the client's address to X-Forwarded-For:
        # rates per client address read it from there. 0: REMOTE_ADDR, whatever a client claims.
        "NUM_PROXIES": int(os.environ.get("AGENTRY_NUM_PROXIES", "0")),
    }
)
SPECTACULAR_SETTINGS.update(
    {
        "DESCRIPTION": "Conversations, runs, their steps and live events; an OpenAI-compatible chat endpoint.",
        # Operations are grouped by resource (the path's first segment after the prefix), not all
        # under "v1"; the operation ids drop the prefix too (conversations_create, not
        # v1_conversations_create).
        "SCHEMA_PATH_PREFIX": r"/api/v1",
        "TAGS": [
            {"name": "agents", "description": "The agents a token's user may talk to."},
            {"name": "conversations", "description": "Conversations with an agent, and the messages that start runs."},
            {"name": "runs", "description": "Runs: status, answer, usage, steps, live events, cancel, export, forks."},
            {"name": "end-users", "description": "Your end users: their conversations, runs, memories; forget one."},
            {"name": "approvals", "description": "Tool calls waiting for a person, and their decisions."},
            {"name": "eval-suites", "description": "Eval suites and their cases."},
            {"name": "eval-runs", "description": "Eval runs of a suite on an agent version, and their metrics."},
            {"name": "openai", "description": "The OpenAI-compatible endpoints: an agent answers as a model."},
            {"name": "hooks", "description": "Signed requests from other systems that start runs."},
            {"name": "attachments", "description": "Files uploaded for conversations: their records and their bytes."},
            {
                "name": "widget",
                "description": "The chat widget's API, for widget.js: authenticated by an end-user token signed "
                "with the widget's secret.",
            },
        ],
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "api.schema.add_streaming_endpoints",
            "api.schema_errors.document_error_responses",
        ],
        # The schema describes the API, not the view that serves it.
        "SERVE_INCLUDE_SCHEMA": False,
        # Swagger UI from our own static files: the docs work offline and load nothing
        # from a CDN. No online validator badge either (it would call out to swagger.io).
        "SWAGGER_UI_DIST": "SIDECAR",
        "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
        "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    }
)
# Throttle counters must be shared by every web process: Redis when there is one. The embedded
# setup runs a single web process, whose memory is then enough.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "agentry",
        # A Redis outage costs a request at most this long, then the failure policy below applies.
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }
    if REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}
# When Redis (throttle and login-failure counters) is unreachable: "open" lets requests through
# uncounted, "closed" refuses them with a 503 (API) or a form error (login pages).
AGENTRY_REDIS_FAILURE = os.environ.get("AGENTRY_REDIS_FAILURE", "open").strip().lower()
if AGENTRY_REDIS_FAILURE not in ("open", "closed"):
    raise ImproperlyConfigured("AGENTRY_REDIS_FAILURE must be 'open' or 'closed'.")
# Failed logins on the admin and approval pages, per username and client address: past the
# limit within the window, that pair cannot log in until the window has passed.
AGENTRY_LOGIN_FAILURE_LIMIT = int(os.environ.get("AGENTRY_LOGIN_FAILURE_LIMIT", "5"))
AGENTRY_LOGIN_FAILURE_WINDOW_SECONDS = int(os.environ.get("AGENTRY_LOGIN_FAILURE_WINDOW_SECONDS", "900"))
# Live event streams: a comment line when idle this long; without Redis, how often they poll.
AGENTRY_SSE_KEEPALIVE_SECONDS = float(os.environ.get("AGENTRY_SSE_KEEPALIVE_SECONDS", "15"))
AGENTRY_SSE_POLL_SECONDS = float(os.environ.get("AGENTRY_SSE_POLL_SECONDS", "1"))
# How long POST /v1/chat/completions waits for a run to end or park before answering 504.
AGENTRY_COMPLETION_TIMEOUT_SECONDS = float(os.environ.get("AGENTRY_COMPLETION_TIMEOUT_SECONDS", "600"))
# How long an MCP tool call (/mcp/) waits for its run before answering where it stands
# ("waiting for approval, run …"); the run goes on either way.
AGENTRY_MCP_CALL_WAIT_SECONDS = float(os.environ.get("AGENTRY_MCP_CALL_WAIT_SECONDS", "300"))
AGENTRY_WEBHOOK_MAX_ATTEMPTS = int(os.environ.get("AGENTRY_WEBHOOK_MAX_ATTEMPTS", "6"))
AGENTRY_WEBHOOK_RETRY_BASE_SECONDS = float(os.environ.get("AGENTRY_WEBHOOK_RETRY_BASE_SECONDS", "10"))
AGENTRY_WEBHOOK_RETRY_MAX_SECONDS = float(os.environ.get("AGENTRY_WEBHOOK_RETRY_MAX_SECONDS", "3600"))
AGENTRY_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("AGENTRY_WEBHOOK_TIMEOUT_SECONDS", "10"))
# A chat answer the model streams is edited at most once per this many seconds per run (0: posted once, whole).
AGENTRY_CHAT_STREAM_EDIT_SECONDS = int(os.environ.get("AGENTRY_CHAT_STREAM_EDIT_SECONDS", "1"))
CELERY_TASK_ROUTES["notifications.tasks.webhook_deliver_task"] = {"queue": "maintenance"}
# A2A push notifications (a2a_server.push), sent and retried like webhook deliveries.
CELERY_TASK_ROUTES["a2a_server.tasks.a2a_push_send_task"] = {"queue": "maintenance"}
CELERY_TASK_ROUTES["knowledge.tasks.base_index_task"] = {"queue": "maintenance"}
# --- Knowledge documents: read on the worker, in a child process with these limits (docs/knowledge.md).
AGENTRY_KNOWLEDGE_MAX_FILE_BYTES = int(os.environ.get("AGENTRY_KNOWLEDGE_MAX_FILE_BYTES", "20000000"))
# The knowledge admin's forms upload such a file: a request to them with a session cookie may
# carry a body this large, the file and the form around it (platform_site.body_limit).
AGENTRY_MAX_UPLOAD_BODY_BYTES = int(
    os.environ.get("AGENTRY_MAX_UPLOAD_BODY_BYTES", str(AGENTRY_KNOWLEDGE_MAX_FILE_BYTES + 1_000_000))
)
# POST /api/v1/attachments/ may carry a body this large: one attachment and the form around it
# (platform_site.body_limit).
AGENTRY_MAX_ATTACHMENT_BODY_BYTES = AGENTRY_ATTACHMENT_MAX_BYTES + 1_000_000
AGENTRY_KNOWLEDGE_PARSE_CPU_SECONDS = int(os.environ.get("AGENTRY_KNOWLEDGE_PARSE_CPU_SECONDS", "20"))
AGENTRY_KNOWLEDGE_PARSE_MEMORY_MB = int(os.environ.get("AGENTRY_KNOWLEDGE_PARSE_MEMORY_MB", "512"))
# Wall clock, for a child that waits rather than computes; CPU time is the limit that usually bites.
AGENTRY_KNOWLEDGE_PARSE_TIMEOUT_SECONDS = int(os.environ.get("AGENTRY_KNOWLEDGE_PARSE_TIMEOUT_SECONDS", "60"))
AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS = int(os.environ.get("AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS", "1000000"))
# Word, Excel and PowerPoint files are zip containers: refused before anything is inflated when
# they declare more entries or more uncompressed bytes than this (a zip bomb).
AGENTRY_KNOWLEDGE_ZIP_MAX_ENTRIES = int(os.environ.get("AGENTRY_KNOWLEDGE_ZIP_MAX_ENTRIES", "5000"))
AGENTRY_KNOWLEDGE_ZIP_MAX_BYTES = int(os.environ.get("AGENTRY_KNOWLEDGE_ZIP_MAX_BYTES", "200000000"))
# Scanned pages and images are read by OCR (rapidocr on onnxruntime, CPU), in the same child: from
# its first OCR page on, the child's limits are these instead of the PARSE ones (the models need
# about 1 GB of address space, a dense page 1 to 3 s of CPU).
AGENTRY_KNOWLEDGE_OCR_MEMORY_MB = int(os.environ.get("AGENTRY_KNOWLEDGE_OCR_MEMORY_MB", "1536"))
AGENTRY_KNOWLEDGE_OCR_CPU_SECONDS = int(os.environ.get("AGENTRY_KNOWLEDGE_OCR_CPU_SECONDS", "300"))
AGENTRY_KNOWLEDGE_OCR_TIMEOUT_SECONDS = int(os.environ.get("AGENTRY_KNOWLEDGE_OCR_TIMEOUT_SECONDS", "600"))
AGENTRY_KNOWLEDGE_OCR_MAX_PIXELS = int(os.environ.get("AGENTRY_KNOWLEDGE_OCR_MAX_PIXELS", "40000000"))
AGENTRY_KNOWLEDGE_OCR_MAX_PAGES = int(os.environ.get("AGENTRY_KNOWLEDGE_OCR_MAX_PAGES", "100"))
CELERY_TASK_ROUTES["evals.tasks.eval_run_collect_task"] = {"queue": "maintenance"}
# An online evaluator's score of a production run that ended (evals.online): a judge's model call after the run.
CELERY_TASK_ROUTES["evals.tasks.online_score_task"] = {"queue": "maintenance"}
# Eval runs still running are collected on this beat, and failed once running this many hours.
CELERY_TASK_ROUTES["evals.tasks.eval_runs_sweep_task"] = {"queue": "maintenance"}
CELERY_BEAT_SCHEDULE["sweep-eval-runs"] = {"task": "evals.tasks.eval_runs_sweep_task", "schedule": 300.0}
AGENTRY_EVAL_RUN_DEADLINE_HOURS = float(os.environ.get("AGENTRY_EVAL_RUN_DEADLINE_HOURS", "24"))
# --- Review queues (reviews/): beat fills every queue this often (opening a queue fills it too);
# a reviewer's claim on a run lapses after this many minutes, and the run goes back to the queue.
AGENTRY_REVIEW_FILL_SECONDS = float(os.environ.get("AGENTRY_REVIEW_FILL_SECONDS", "300"))
AGENTRY_REVIEW_CLAIM_MINUTES = float(os.environ.get("AGENTRY_REVIEW_CLAIM_MINUTES", "30"))
CELERY_TASK_ROUTES["reviews.tasks.review_queues_fill_task"] = {"queue": "maintenance"}
CELERY_BEAT_SCHEDULE["fill-review-queues"] = {
    "task": "reviews.tasks.review_queues_fill_task",
    "schedule": AGENTRY_REVIEW_FILL_SECONDS,
}

# --- Broker: how long a task's message may stay unacknowledged -------------------------------
# A worker acknowledges a message when its task ends (acks late), and holds a retry with a
# countdown (a webhook's) unacknowledged until it runs: the longest hold is the longest countdown
# plus a task's hard time limit (a run's task stops at its slice, well under that limit).
AGENTRY_BROKER_MAX_HOLD_SECONDS = int(AGENTRY_WEBHOOK_RETRY_MAX_SECONDS) + CELERY_TASK_TIME_LIMIT
if AGENTRY_BROKER_KIND == "redis":
    # Redis hands a message out again once it has been unacknowledged this long, which would run
    # a live task or a waiting retry twice; a run whose worker died is the sweeper's long before.
    CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] = AGENTRY_BROKER_MAX_HOLD_SECONDS
# RabbitMQ gives a dead worker's messages back as soon as its connection drops, but closes the
# channel of a worker holding a delivery past the server's consumer_timeout (30 minutes by
# default, which no client can change): the server's must exceed this hold (docs/configuration.md,
# "Running without Docker").


# --- Monitoring (console/monitoring; rollups in conversations/monitoring) ----
# Flower's address, linked from the monitoring page (empty: no link).
AGENTRY_FLOWER_URL = os.environ.get("AGENTRY_FLOWER_URL", "")
# A running run counts as stuck when its lease lapsed or it has run longer than this.
AGENTRY_MONITOR_STUCK_SECONDS = int(os.environ.get("AGENTRY_MONITOR_STUCK_SECONDS", "600"))
# Hourly rollups: rebuilt by beat this often, recomputing at least this many past hours.
AGENTRY_MONITOR_ROLLUP_SECONDS = float(os.environ.get("AGENTRY_MONITOR_ROLLUP_SECONDS", "30"))
AGENTRY_MONITOR_ROLLUP_OVERLAP_HOURS = int(os.environ.get("AGENTRY_MONITOR_ROLLUP_OVERLAP_HOURS", "2"))
# Queue depths and worker pings are cached this long; the probes give up after these timeouts.
AGENTRY_MONITOR_PROBE_CACHE_SECONDS = float(os.environ.get("AGENTRY_MONITOR_PROBE_CACHE_SECONDS", "10"))
AGENTRY_MONITOR_PING_TIMEOUT = float(os.environ.get("AGENTRY_MONITOR_PING_TIMEOUT", "0.5"))
AGENTRY_MONITOR_BROKER_TIMEOUT = float(os.environ.get("AGENTRY_MONITOR_BROKER_TIMEOUT", "2"))
# How often the open dashboard refreshes itself.
AGENTRY_MONITOR_REFRESH_SECONDS = float(os.environ.get("AGENTRY_MONITOR_REFRESH_SECONDS", "10"))
# Prometheus /metrics (console.metrics): scraped with this bearer token (empty: staff sessions
# only); latency histograms and per-model sums cover the ledger rows of this last window.
AGENTRY_METRICS_TOKEN = os.environ.get("AGENTRY_METRICS_TOKEN", "")
AGENTRY_METRICS_WINDOW_SECONDS = int(os.environ.get("AGENTRY_METRICS_WINDOW_SECONDS", "3600"))
# OpenTelemetry traces (platform_site.telemetry, engine.tracing): on when an OTLP endpoint is
# named; the SDK reads the other standard OTEL_* variables (service name, headers, sampler) itself.
OTEL_TRACES_ENABLED = not env_bool("OTEL_SDK_DISABLED", False) and bool(
    os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
)
CELERY_TASK_ROUTES["conversations.monitoring.tasks.rollups_refresh_task"] = {"queue": "maintenance"}
CELERY_BEAT_SCHEDULE["monitoring-rollups"] = {
    "task": "conversations.monitoring.tasks.rollups_refresh_task",
    "schedule": AGENTRY_MONITOR_ROLLUP_SECONDS,
}

# Structured logs (platform_site/logs.py): LOG_FORMAT=json writes one JSON object per line with
# the run / model call / tool invocation / request ids bound where the line was logged.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "platform_site.logs.ContextFilter"}},
    "formatters": {
        "text": {"()": "platform_site.logs.HumanFormatter"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(message)s",
            "timestamp": "time",
            "rename_fields": {"levelname": "level", "name": "logger"},
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "text",
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # The MCP server (/mcp/) serves each request with a session manager of its own, which logs
    # its start and end at INFO: two lines per request.
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        "mcp.server.streamable_http": {"level": "WARNING"},
        "mcp.server.streamable_http_manager": {"level": "WARNING"},
    },
}
