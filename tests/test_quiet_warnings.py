"""The Mamba model silences torch's "No CUDA runtime is found" notice on CPU, and nothing else."""
import subprocess
import sys

SCRIPT = """
import logging, os, sys, torch
if sys.argv[2] == "mamba":
    import models.mamba
torch.cuda._is_compiled = lambda: True  # a CUDA build of torch on a machine without a GPU
torch.cuda.is_available = lambda: False
torch.version.cuda = "12.4"
os.environ["CUDA_HOME"] = sys.argv[1]
import torch.utils.cpp_extension  # logs the notice at import
logging.getLogger("torch.utils.cpp_extension").warning("another warning")
"""


def stderr_of(tmp_path, first: str) -> str:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), first], capture_output=True, text=True,
                          check=True).stderr


def test_no_cuda_runtime_notice_is_silenced_and_only_it(tmp_path):
    assert "No CUDA runtime is found" in stderr_of(tmp_path, "torch")  # the notice arises (the control)
    quiet = stderr_of(tmp_path, "mamba")
    assert "No CUDA runtime is found" not in quiet and "another warning" in quiet
