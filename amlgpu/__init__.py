"""aml-gpu-training's command-line tool, ``amlgpu``: the top floor.

Commands, the offline plan (a mock engine), artifacts and reports. The stack model it works on is
the :mod:`model` package; nothing below this package imports it.
"""
