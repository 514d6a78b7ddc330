import pytest

from tests.api_helpers import make_user


@pytest.fixture
def owner(db):
    return make_user()
