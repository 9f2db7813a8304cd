"""Stand-in for vLLM's DP example: reports exactly what it was started with."""

import json
import os
import sys

print("standin argv: " + json.dumps(sys.argv))
print("standin VLLM_LOGGING_LEVEL=" + os.environ.get("VLLM_LOGGING_LEVEL", "<unset>"))
print("standin PYTORCH_ROCM_ARCH=" + repr(os.environ.get("PYTORCH_ROCM_ARCH", "<unset>")))
token = os.environ.get("HF_TOKEN")
print(f"standin HF_TOKEN received: {'yes' if token else 'no'}; value {token}")
print("standin devices: " + ",".join(sorted(os.listdir("/dev/dri"))) if os.path.isdir("/dev/dri") else "no /dev/dri")
print(f"standin kfd: {'yes' if os.path.exists('/dev/kfd') else 'no'}")
print("standin env: " + json.dumps(dict(sorted(os.environ.items()))))
for rank in range(2):
    print(f"DP rank {rank} needs to process 200 prompts")
