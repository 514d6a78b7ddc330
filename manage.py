#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    from django.core.management import execute_from_command_line

    from audit.context import cli_origin, origin_set

    # A command typed at a terminal changes configuration as the command line (the audit's
    # source), in the name of the account that typed it; requests a command serves set their own.
    with origin_set(cli_origin()):
        execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
