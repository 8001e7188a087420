// A valid InferenceModel used across the api tests (the GLM example's shape).
#pragma once

#include "infergate/common/json.h"

namespace infergate::op::api::testing {

inline Json valid_model() {
  return Json::parse(R"({
    "apiVersion": "serving.infergate.dev/v1alpha1",
    "kind": "InferenceModel",
    "metadata": {"name": "glm-4-9b", "namespace": "models", "uid": "u-1", "resourceVersion": "7", "generation": 3},
    "spec": {
      "replicas": 2,
      "artifact": {
        "volume": {"persistentVolumeClaim": {"claimName": "verified-model-artifacts"}},
        "path": "glm-4-9b/r3",
        "trust": {"publicKeySecretRef": {"name": "model-signing-key"}, "expectName": "glm-4-9b", "minVersion": 3}
      },
      "serving": {"weightFormat": "int8", "kvCacheDtype": "int8", "maxContextLength": 32768, "maxConcurrency": 16},
      "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}}
    }
  })");
}

}  // namespace infergate::op::api::testing
