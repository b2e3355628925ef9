import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "covers(*ids): requirements this test checks")


@pytest.fixture
def store_path(tmp_path, monkeypatch):
    """A store folder (not created) that `dhp` commands use through $DHP_STORE."""
    path = tmp_path / "store"
    monkeypatch.setenv("DHP_STORE", str(path))
    return path
