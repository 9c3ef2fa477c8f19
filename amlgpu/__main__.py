from amlgpu.cli import console_main

console_main()
