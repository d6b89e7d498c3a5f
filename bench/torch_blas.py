"""Which BLAS PyTorch's CPU linear layers run on, as JSON on one line: Debian's python3-torch is
built with BLAS=generic, so torch.mm / F.linear call sgemm_ from whatever libblas.so.3 the loader
finds (the reference BLAS unless an optimized one is installed or put first on LD_LIBRARY_PATH).
The library is read from this process's own memory map after a matmul, not guessed from the
alternatives system. Exit 0; the caller decides what a reference BLAS means for its ratio.
"""
import json
import os

import torch

torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "0")) or torch.get_num_threads())
a = torch.randn(256, 256)
(a @ a).sum().item()  # loads and runs the BLAS
libs = sorted({line.split()[-1] for line in open("/proc/self/maps")
               if len(line.split()) >= 6 and any(k in line.split()[-1] for k in
                                                 ("blas", "mkl", "blis", "atlas"))})
blas = next((l for l in libs if "libblas" in l or "openblas" in l or "mkl" in l or "blis" in l),
            "")
kind = ("openblas" if "openblas" in blas else "mkl" if "mkl" in blas else
        "blis" if "blis" in blas else "atlas" if "atlas" in blas else
        "reference" if blas else "none found")
print(json.dumps({"blas": os.path.realpath(blas) if blas else "", "blas_kind": kind,
                  "optimized": kind in ("openblas", "mkl", "blis", "atlas"),
                  "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                  "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "")}))
