"""What Horovod was built with, printed as `horovodrun --check-build` prints it, for hvd_horovod's gate.

The same questions through the same public calls: each framework's extension imported (horovod.tensorflow,
horovod.torch, horovod.mxnet) in a forked process, and each of mpi_built(), gloo_built(), nccl_built(), ddl_built()
and ccl_built() answered by the first framework that can. horovodrun forks a process per framework and per question,
each importing the framework again (six imports of PyTorch for a PyTorch build: about 8 s of CPU on a node); this
asks all the questions of a framework in one process (one import each). Run with the env's Python:
`python -I -c "<this file>"`.
"""

import importlib
import multiprocessing
import os
import queue as queues
import sys

EXTENSIONS = ("tensorflow", "torch", "mxnet")  # horovod.common.util.EXTENSIONS, in its order
QUESTIONS = ("mpi_built", "gloo_built", "nccl_built", "ddl_built", "ccl_built")


def ask(name, answers):
    """In a forked process: the framework's answers, or None where its extension does not load (output muted)."""
    sys.stdout = open(os.devnull, "w")
    sys.stderr = open(os.devnull, "w")
    try:
        ext = importlib.import_module("." + name, "horovod")
    except BaseException:  # horovodrun: the extension is not available
        answers.put(None)
        return
    found = {}
    for question in QUESTIONS:
        try:
            found[question] = getattr(ext, question)()
        except BaseException:  # horovodrun: this framework cannot answer; the next one may
            found[question] = None
    answers.put(found)


def framework(name):
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    process = context.Process(target=ask, args=(name, answers), daemon=True)
    process.start()
    process.join()
    try:
        return answers.get_nowait()
    except queues.Empty:  # the process died before it answered (a crash in the extension)
        return None


def main():
    import horovod

    found = {name: framework(name) for name in EXTENSIONS}

    def built(question):
        for name in EXTENSIONS:
            answer = (found[name] or {}).get(question)
            if answer is not None:
                return answer
        return None

    def box(value):
        return "X" if value else " "

    mpi, gloo = built("mpi_built"), built("gloo_built")
    print(f"Horovod v{horovod.__version__}:\n\n"
          "Available Frameworks:\n"
          f"    [{box(found['tensorflow'] is not None)}] TensorFlow\n"
          f"    [{box(found['torch'] is not None)}] PyTorch\n"
          f"    [{box(found['mxnet'] is not None)}] MXNet\n\n"
          "Available Controllers:\n"
          f"    [{box(mpi)}] MPI\n"
          f"    [{box(gloo)}] Gloo\n\n"
          "Available Tensor Operations:\n"
          f"    [{box(built('nccl_built'))}] NCCL\n"
          f"    [{box(built('ddl_built'))}] DDL\n"
          f"    [{box(built('ccl_built'))}] CCL\n"
          f"    [{box(mpi)}] MPI\n"
          f"    [{box(gloo)}] Gloo")


main()
