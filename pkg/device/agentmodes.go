package device

// GPU backends of the node agents (--backend): what Backend.Name reports. pkg/nodeagent,
// pkg/preflight and the commands use these (their BackendNVML/BackendFake are these).
const (
	// BackendNVML is the driver's NVML library (real GPUs).
	BackendNVML = "nvml"
	// BackendFake is a simulated pkg/fake fleet.
	BackendFake = "fake"
)

// Device-list strategies of the device plugin (--device-list-strategy): how a container's GPUs
// are named to the runtime. The DRA driver always uses CDI. pkg/deviceplugin and pkg/preflight
// use these (their StrategyEnvvar/StrategyCDI are these).
const (
	// StrategyEnvvar names the GPUs in NVIDIA_VISIBLE_DEVICES.
	StrategyEnvvar = "envvar"
	// StrategyCDI answers with CDI device names and writes the CDI spec.
	StrategyCDI = "cdi"
)
