"""The test labs, one module per job (import each name from the module that holds it, never from here):

- ``tests.lab.images``: node images (``build_image``, ``build_packaged_image``, ``build_kernel_image``,
  ``role_packages``, ``IMAGE``, ``PACKAGED_IMAGE``, ``KERNEL_IMAGE``), the labs' ``LABEL``, ``docker`` and
  ``host_ca_bundle``
- ``tests.lab.stacks``: the CPU stack every lab converges (``TORCH``, ``BASE_PACKAGES``, ``cpu_stack``)
- ``tests.lab.cluster``: the container lab (``Lab``)
- ``tests.lab.gapped``: the air-gapped site behind a bastion (``Gapped``)
- ``tests.lab.__main__``: the command, ``python -m tests.lab build|up|down`` (tests/demo.sh runs it)
"""
