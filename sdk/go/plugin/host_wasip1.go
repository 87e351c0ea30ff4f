//go:build wasip1

package plugin

import "unsafe"

// The host functions of ABI v1 (docs/ABI.md), imported from the module "tinybroker". A Go
// string parameter is passed as two i32s, pointer and length; a buffer to fill as an
// unsafe.Pointer and its capacity.

//go:wasmimport tinybroker v1_log
func hostLog(level int32, msg string)

//go:wasmimport tinybroker v1_now
func hostNow() int64

//go:wasmimport tinybroker v1_config
func hostConfig(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_config_get
func hostConfigGet(key string, buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_set_reason
func hostSetReason(reason string)

//go:wasmimport tinybroker v1_msg_topic
func hostMsgTopic(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_msg_payload
func hostMsgPayload(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_msg_header
func hostMsgHeader(key string, buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_msg_header_count
func hostMsgHeaderCount() int32

//go:wasmimport tinybroker v1_msg_header_name
func hostMsgHeaderName(index int32, buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_msg_id
func hostMsgID(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_msg_set_topic
func hostMsgSetTopic(topic string) int32

//go:wasmimport tinybroker v1_msg_set_payload
func hostMsgSetPayload(payload unsafe.Pointer, n uint32) int32

//go:wasmimport tinybroker v1_msg_set_header
func hostMsgSetHeader(key, value string) int32

//go:wasmimport tinybroker v1_msg_del_header
func hostMsgDelHeader(key string) int32

//go:wasmimport tinybroker v1_event_subscription
func hostEventSubscription(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_event_group
func hostEventGroup(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_event_attempt
func hostEventAttempt() int32

//go:wasmimport tinybroker v1_event_in_flight_ns
func hostEventInFlightNs() int64

//go:wasmimport tinybroker v1_event_reason
func hostEventReason(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_emit
func hostEmit(topic string, payload unsafe.Pointer, n uint32) int32

//go:wasmimport tinybroker v1_emit_header
func hostEmitHeader(handle int32, key, value string) int32

//go:wasmimport tinybroker v1_msg_key
func hostMsgKey(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_msg_set_key
func hostMsgSetKey(key string) int32

//go:wasmimport tinybroker v1_emit_key
func hostEmitKey(handle int32, key string) int32

//go:wasmimport tinybroker v1_kv_get
func hostKVGet(key string, buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport tinybroker v1_kv_set
func hostKVSet(key string, value unsafe.Pointer, n uint32, ttlMS int64) int32

//go:wasmimport tinybroker v1_kv_cas
func hostKVCas(key string, old unsafe.Pointer, oldN uint32, value unsafe.Pointer, n uint32, ttlMS int64) int32

//go:wasmimport tinybroker v1_kv_delete
func hostKVDelete(key string) int32

//go:wasmimport tinybroker v1_metric_define
func hostMetricDefine(kind int32, name, help, label, buckets string) int32

//go:wasmimport tinybroker v1_metric_add
func hostMetricAdd(id int32, value int64, labelValue string) int32

//go:wasmimport tinybroker v1_metric_set
func hostMetricSet(id int32, value int64, labelValue string) int32

//go:wasmimport tinybroker v1_metric_observe
func hostMetricObserve(id int32, value int64, labelValue string) int32

// abiV1 is the ABI version marker. The broker never calls it.
//
//lint:ignore U1000 the host calls it: exported by go:wasmexport, which staticcheck does not read
//go:wasmexport tinybroker_abi_v1
func abiV1() {}

// tbInit is called by the broker once per instance, after the Go runtime's _initialize has
// run every package's init function.
//
//lint:ignore U1000 the host calls it: exported by go:wasmexport, which staticcheck does not read
//go:wasmexport tb_v1_init
func tbInit() int32 { return runInit() }
