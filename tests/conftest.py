def pytest_configure(config):
    config.addinivalue_line("markers", "covers(*ids): requirements this test checks")
