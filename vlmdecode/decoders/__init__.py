"""Decoders: the contract and the one decode loop (`base`), and one module per decoder kind (`cpu`, `cuda`,
`naive`). Mode names and the factory of each mode are registered in `vlmdecode.modes`. Imports nothing, so
importing a CPU decoder never imports CuPy."""
