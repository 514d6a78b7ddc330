import pytest

from tests.support.factories import make_user


@pytest.fixture
def owner(db):
    return make_user()
