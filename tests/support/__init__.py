"""What the tests share: tiny models and data (`helpers`), the cheap options of every registered
unit (`cheap_options`), the reliability and monitor tests' pieces, an offline W&B run reader,
the two ways to run the console script (`in_process`: the `cli` fixture; `console`: the `console`
fixture, each command a process of its own, by default forked from the warm console server), and
the plugins that tests/conftest.py registers. Test modules import them as `tests.support.<name>`.
"""
