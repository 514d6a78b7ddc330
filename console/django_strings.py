"""Words of Django's own admin templates that Django's Simplified Chinese catalogue does not
translate yet (Django 5.2). Marking them here puts them in our catalogue (locale/zh_Hans), which
the site consults before Django's; drop a line once Django ships its translation."""

from django.utils.translation import gettext_noop

DJANGO_ADMIN_STRINGS = [
    # admin/app_list.html: the table head a screen reader reads on the index and app pages.
    gettext_noop("Model name"),
    gettext_noop("Add link"),
    gettext_noop("Change or view list link"),
    # auth/user/add_form.html
    gettext_noop("After you’ve created a user, you’ll be able to edit more user options."),
]
