"""Passwords hashed at a test's cost, in the test process only.

Django hashes a password with PBKDF2 at 1,000,000 iterations: 0.3 to 0.5 s of CPU on a loaded
2-core machine for every user a test creates with a password and every login it makes, several
hundred times in the suite. The test process hashes with the same algorithm at 1,000 iterations.
A PBKDF2 hash records its iterations, so the workers and web servers the tests start, which keep
Django's hashers, still check these passwords (and upgrade one on a login, as they would any older
hash); what the tests check of logins and permissions is unchanged.
"""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000


def install() -> None:
    from django.conf import settings
    from django.contrib.auth import hashers

    settings.PASSWORD_HASHERS = ["tests.support.passwords.QuickPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]
    hashers.get_hashers.cache_clear()
    hashers.get_hashers_by_algorithm.cache_clear()
