import os

from django.core.wsgi import get_wsgi_application

from platform_site.heap import heap_settle

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
application = get_wsgi_application()
heap_settle()  # once the application is loaded (platform_site.heap)
