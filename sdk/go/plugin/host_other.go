//go:build !wasip1

package plugin

import "unsafe"

// Outside WebAssembly there is no broker to call: the host functions panic. The package
// still builds, so that a plugin's code can be vetted, and its pure functions tested,
// natively.

func noHost() {
	panic("plugin: the broker's host functions exist only in a WebAssembly plugin (GOOS=wasip1 GOARCH=wasm)")
}

func hostLog(level int32, msg string)                                     { noHost() }
func hostNow() int64                                                      { noHost(); return 0 }
func hostConfig(buf unsafe.Pointer, capacity uint32) int32                { noHost(); return 0 }
func hostConfigGet(key string, buf unsafe.Pointer, capacity uint32) int32 { noHost(); return 0 }
func hostSetReason(reason string)                                         { noHost() }
func hostMsgTopic(buf unsafe.Pointer, capacity uint32) int32              { noHost(); return 0 }
func hostMsgPayload(buf unsafe.Pointer, capacity uint32) int32            { noHost(); return 0 }
func hostMsgHeader(key string, buf unsafe.Pointer, capacity uint32) int32 { noHost(); return 0 }
func hostMsgHeaderCount() int32                                           { noHost(); return 0 }
func hostMsgHeaderName(index int32, buf unsafe.Pointer, capacity uint32) int32 {
	noHost()
	return 0
}
func hostMsgID(buf unsafe.Pointer, capacity uint32) int32             { noHost(); return 0 }
func hostMsgSetTopic(topic string) int32                              { noHost(); return 0 }
func hostMsgSetPayload(payload unsafe.Pointer, n uint32) int32        { noHost(); return 0 }
func hostMsgSetHeader(key, value string) int32                        { noHost(); return 0 }
func hostMsgDelHeader(key string) int32                               { noHost(); return 0 }
func hostEventSubscription(buf unsafe.Pointer, capacity uint32) int32 { noHost(); return 0 }
func hostEventGroup(buf unsafe.Pointer, capacity uint32) int32        { noHost(); return 0 }
func hostEventAttempt() int32                                         { noHost(); return 0 }
func hostEventInFlightNs() int64                                      { noHost(); return 0 }
func hostEventReason(buf unsafe.Pointer, capacity uint32) int32       { noHost(); return 0 }
func hostEmit(topic string, payload unsafe.Pointer, n uint32) int32   { noHost(); return 0 }
func hostEmitHeader(handle int32, key, value string) int32            { noHost(); return 0 }
func hostMsgKey(buf unsafe.Pointer, capacity uint32) int32            { noHost(); return 0 }
func hostMsgSetKey(key string) int32                                  { noHost(); return 0 }
func hostEmitKey(handle int32, key string) int32                      { noHost(); return 0 }
func hostKVGet(key string, buf unsafe.Pointer, capacity uint32) int32 { noHost(); return 0 }
func hostKVSet(key string, value unsafe.Pointer, n uint32, ttlMS int64) int32 {
	noHost()
	return 0
}
func hostKVCas(key string, old unsafe.Pointer, oldN uint32, value unsafe.Pointer, n uint32, ttlMS int64) int32 {
	noHost()
	return 0
}
func hostKVDelete(key string) int32 { noHost(); return 0 }

func hostMetricDefine(kind int32, name, help, label, buckets string) int32 { noHost(); return 0 }
func hostMetricAdd(id int32, value int64, labelValue string) int32         { noHost(); return 0 }
func hostMetricSet(id int32, value int64, labelValue string) int32         { noHost(); return 0 }
func hostMetricObserve(id int32, value int64, labelValue string) int32     { noHost(); return 0 }
