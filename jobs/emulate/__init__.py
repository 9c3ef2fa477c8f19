"""Local emulation of distributed runs: a declared run on one machine, with Azure ML's launch contract.

* :mod:`analysis.contract`: what each process sees, per distribution type (pure functions);
* :mod:`jobs.emulate.scale`, :mod:`jobs.emulate.commandline`, :mod:`jobs.emulate.snapshot`,
  :mod:`jobs.emulate.devices`: the local topology, the command, the code snapshot, the GPUs;
* :mod:`jobs.emulate.prepare`: a resolved run -> a :class:`~jobs.emulate.launcher.LaunchPlan`;
* :mod:`jobs.emulate.launcher`: the backend interface (``Launcher.launch(plan) -> RunResult``);
* :mod:`jobs.emulate.local`: the local-process backend; :mod:`jobs.emulate.mpi` and
  :mod:`jobs.emulate.mpi_rank`: ``distribution: mpi`` through Open MPI's ``mpirun``.

``amlgpu run-local`` (:mod:`amlgpu.commands.run_local`) is the user's entry point.
"""
