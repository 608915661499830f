/* The subset of NVIDIA's NVML ABI that lpx calls, declared from NVIDIA's documentation
 * instead of nvml.h: lpx must build where no CUDA headers or driver exist. Shared by
 * telemetry.c (which loads NVML with dlopen) and the tests' fake NVML. */
#ifndef LPX_TELEMETRY_NVML_ABI_H
#define LPX_TELEMETRY_NVML_ABI_H

typedef int nvml_ret;
typedef struct nvml_device_st *nvml_device;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};
enum { NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };
enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_TEMP_THRESHOLD_SHUTDOWN = 0, NVML_TEMP_THRESHOLD_SLOWDOWN = 1 };
enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 };
enum { NVML_MEMORY_ERROR_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0 };

typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct {
    unsigned int gpu, memory;
} nvml_utilization;
/* nvmlProcessInfo_t as taken by the _v2 and _v3 process queries */
typedef struct {
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
} nvml_process_info;
#define NVML_VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
/* nvmlPciInfo_t as the _v3 PCI query and _v2 NVLink remote query fill it */
typedef struct {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info;
#define NVML_NVLINK_MAX_LINKS 18
enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };
/* nvmlGpuTopologyLevel_t: the nearest common ancestor of two GPUs' PCI paths */
enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50,
};

#endif
