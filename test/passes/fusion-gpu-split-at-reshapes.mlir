// RUN: fusec-opt %s --fusion-gpu-split-at-reshapes --split-input-file | filecheck %s

// A group neither group-level emitter takes (it transposes, then divides each transposed row
// by its sum: the fast emitter takes no transpose, the data-movement kernels no reduction
// broadcast back) with a reshape of a value it computes (exp, then a head split): the fallback
// could not slice the exp through the reshape and every thread would compute it whole, so
// the group is cut at the reshape; the second piece, a group of its own the next round and
// still refused, after the sum, which the division reads back at every element of its row:
// the sum is a kernel, the division another, which reads the sums and transposes the exp
// again (a copy of the reshape and the transpose, not a transposed tensor written out by
// the first). A group the fast emitter builds (tanh then
// a reshape) and one the data-movement kernels build (exp, head split, transpose: no
// reduction) are left whole.
// CHECK-LABEL: func.func @main
// CHECK: %[[A:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<16x32xf32>) -> tensor<16x32xf32>
// CHECK-SAME: fusion.split = "reshape"
// CHECK: math.exp
// CHECK-NOT: linalg.transpose
// CHECK: %[[S:.+]] = fusion.group vertical (%{{.+}} = %[[A]] : tensor<16x32xf32>) -> tensor<4x16xf32>
// CHECK-SAME: fusion.split = "reduction read back"
// CHECK: tensor.expand_shape
// CHECK: linalg.transpose
// CHECK: arith.addf
// CHECK-NOT: arith.divf
// CHECK: %[[B:.+]] = fusion.group vertical (%{{.+}} = %[[A]] : tensor<16x32xf32>, %{{.+}} = %[[S]] : tensor<4x16xf32>) -> tensor<4x16x8xf32>
// CHECK-SAME: fusion.split = "reduction read back"
// CHECK: tensor.expand_shape
// CHECK: linalg.transpose
// CHECK-NOT: arith.addf
// CHECK: arith.divf
// CHECK: %[[C:.+]] = fusion.group vertical (%{{.+}} = %arg0 : tensor<16x32xf32>) -> tensor<16x4x8xf32> {
// CHECK: math.tanh
// CHECK: tensor.expand_shape
// CHECK: %[[D:.+]] = fusion.group vertical (%{{.+}} = %arg0 : tensor<16x32xf32>) -> tensor<4x16x8xf32> {
// CHECK-NOT: fusion.split
// CHECK: math.exp
// CHECK: tensor.expand_shape
// CHECK: linalg.transpose
// CHECK: return %[[B]], %[[C]], %[[D]]
#mm = affine_map<(d0, d1) -> (d0, d1)>
#m3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#r3 = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @main(%x: tensor<16x32xf32>) -> (tensor<4x16x8xf32>, tensor<16x4x8xf32>, tensor<4x16x8xf32>) {
  %g = fusion.group vertical (%a = %x : tensor<16x32xf32>) -> tensor<4x16x8xf32> {
    %e = tensor.empty() : tensor<16x32xf32>
    %ex = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<16x32xf32>
    %r = tensor.expand_shape %ex [[0], [1, 2]] output_shape [16, 4, 8] : tensor<16x32xf32> into tensor<16x4x8xf32>
    %e2 = tensor.empty() : tensor<4x16x8xf32>
    %t = linalg.transpose ins(%r : tensor<16x4x8xf32>) outs(%e2 : tensor<4x16x8xf32>) permutation = [1, 0, 2]
    %z = arith.constant 0.0 : f32
    %e3 = tensor.empty() : tensor<4x16xf32>
    %f = linalg.fill ins(%z : f32) outs(%e3 : tensor<4x16xf32>) -> tensor<4x16xf32>
    %s = linalg.generic {indexing_maps = [#m3, #r3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t : tensor<4x16x8xf32>) outs(%f : tensor<4x16xf32>) {
    ^bb0(%i: f32, %o: f32):
      %p = arith.addf %i, %o : f32
      linalg.yield %p : f32
    } -> tensor<4x16xf32>
    %e4 = tensor.empty() : tensor<4x16x8xf32>
    %d = linalg.generic {indexing_maps = [#m3, #r3, #m3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t, %s : tensor<4x16x8xf32>, tensor<4x16xf32>) outs(%e4 : tensor<4x16x8xf32>) {
    ^bb0(%i: f32, %j: f32, %o: f32):
      %q = arith.divf %i, %j : f32
      linalg.yield %q : f32
    } -> tensor<4x16x8xf32>
    fusion.yield %d : tensor<4x16x8xf32>
  }
  %h = fusion.group vertical (%a = %x : tensor<16x32xf32>) -> tensor<16x4x8xf32> {
    %e = tensor.empty() : tensor<16x32xf32>
    %ex = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.tanh %i : f32
      linalg.yield %t : f32
    } -> tensor<16x32xf32>
    %r = tensor.expand_shape %ex [[0], [1, 2]] output_shape [16, 4, 8] : tensor<16x32xf32> into tensor<16x4x8xf32>
    fusion.yield %r : tensor<16x4x8xf32>
  }
  %k = fusion.group vertical (%a = %x : tensor<16x32xf32>) -> tensor<4x16x8xf32> {
    %e = tensor.empty() : tensor<16x32xf32>
    %ex = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<16x32xf32>
    %r = tensor.expand_shape %ex [[0], [1, 2]] output_shape [16, 4, 8] : tensor<16x32xf32> into tensor<16x4x8xf32>
    %e2 = tensor.empty() : tensor<4x16x8xf32>
    %t = linalg.transpose ins(%r : tensor<16x4x8xf32>) outs(%e2 : tensor<4x16x8xf32>) permutation = [1, 0, 2]
    fusion.yield %t : tensor<4x16x8xf32>
  }
  return %g, %h, %k : tensor<4x16x8xf32>, tensor<16x4x8xf32>, tensor<4x16x8xf32>
}

// -----

// An embedding lookup (a gather: no fast-emitter kernel) feeding LayerNorm's reductions
// (no data-movement kernel: a reduction broadcast back) has no reshape to cut at: it is cut
// before the first reduction, the lookup alone (a data-movement kernel) and the LayerNorm
// reading it (a row kernel). The gather must not stay with the reductions.
// CHECK-LABEL: func.func @embedding_layernorm
// CHECK: %[[LOOKUP:.+]] = fusion.group single
// CHECK-SAME: fusion.split
// CHECK: tensor.extract
// CHECK-NOT: iterator_types = ["parallel", "parallel", "reduction"
// CHECK: fusion.yield
// CHECK: fusion.group vertical (%{{.*}} = %[[LOOKUP]]
// CHECK-NOT: tensor.extract
// CHECK: fusion.yield
#emb_ln_map = affine_map<(d0, d1, d2) -> (d0, d1)>
#emb_ln_map1 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#emb_ln_map2 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#emb_ln_map3 = affine_map<(d0, d1, d2) -> (d2)>
module {
  func.func @embedding_layernorm(%arg0: tensor<2x8xi64>) -> tensor<2x8x16xf32> {
    %0 = fusion.group vertical (%arg1 = %arg0 : tensor<2x8xi64>) -> tensor<2x8x16xf32> attributes {fusion.bytes_fused = 4480 : i64, fusion.bytes_unfused = 15552 : i64, fusion.device = "nvidia-h200", fusion.flops = 3408 : i64, fusion.launches_saved = 12 : i64, fusion.parallel_tiles = 16 : i64, fusion.reason = "13 ops in one kernel: saves 12 launches and 11072 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4001 : i64, fusion.time_unfused_ns = 52004 : i64, fusion.working_set = 68 : i64} {
      %cst = arith.constant dense<0.000000e+00> : tensor<16xf32>
      %cst_0 = arith.constant dense<1.000000e+00> : tensor<16xf32>
      %cst_1 = arith.constant 1.000000e-05 : f64
      %cst_2 = arith.constant 1.600000e+01 : f32
      %cst_3 = arith.constant 0.000000e+00 : f32
      %c0 = arith.constant 0 : index
      %c50 = arith.constant 50 : index
      %cst_4 = arith.constant dense<"0x851B90BF8A8093BFD64B80BE5D25DEBE1545593F8327313F6DCCA1BEC15F07C03801A53EF4B4A1BFFF30B33EBBC39D3E776FF53D936B9E3F8EF28E3F7C367DBEC223ADBF4614D9BF0410113F5D234B3F8B4D193F5B0DC7BFCAC6AEBE4E2FED3F6B0C403F2BE315BFEB8E31BEA4E13B3EC0D6B13F000DCB3F9C40723F33FB57BFC8131DBF6467013D2840FCBE70607E3ED01FE13ED637E63DF80A243F3CDFE13EB987D1BD9CDD4A3F534F94BE1712573D2FDA053F55571340B704BCBF9E18CBBF9F4F2CBFDE715F3FF415873FAA1C363E10DD6BBE0894C8BE5D150B3F1752CABE9476E4BE24783E3F75AFC23FAD455A40D9FDC3BF23F89DBFC2ECE83FFC300DBF3EBA11BF3F836B3F392F8E3F981AA53FCE34BDBF8B4D2440C23CF2BE4FCDAB3EC18DD0BF00BC0CBFD6ACF5BE42D6FFBED09288BF57B68E3F2C0C10BEDE454E3F5C2DBFBD86E22F3FD69B56BF25C9693A5F86573F47D1CCBE170D853FD85FB73EACE77BBE6E5C134031DBF0BF90AE4BBDDCC185BF3DDD74BFB458093D3CC8353FC5ABD23F041AAEBFE16AB03E0D16053FAD4027C01326D9BF37B869BE43568F3E46DA7C3EEF769D3D190FAD3E59A7E83E0FF4E93EFA885DBFCC03483F12426DBFF01560BE1CD81BC0555495BD55350BBD9967763F2EC6B23EEFE46BBF812C66BD2B691FBFFE6CEDBEF7FCF53F731ACEBE95C0FD3DA017953F35626C3FE492B13FEA2462BFD47BD6BE1C094EBFCBCB103FDB401C3F5C0BEF3E22AFF93F9D1388BFF75C9EBD6A62EE3DC80F18BF0A399FBFF115D1BD504B84BF3212A0BE30AF7B3EBDEF84BEB25AF23D74D0793EA211953F41C0933E24F0C53EB3E34DBEB483F1BDD4CF443E13AC45BF843EF3BF4FD0053E9C4C34BF1B23A13E9A2B213E434EC53EDC96773F99B77DBF076C9A3EFAC8DBBDDA9A7F3F8B57FFBE2AD8423FF7481E3FF9CAA03EF7735A3E36DDF5BD2D8EB83E32C9A0BE1B138ABF0897763E93B7B2BF887687BD517AB7BE41E1C7BFCE93B5BE96608A3F2FA2063EB469C93FCB0B483F77118ABF8C8D38BFEF42BC3F08208D3E2AB22A3F52907EBF143D98BFDF1499BFEB430FBF9C91083F7153D03E3F07CA3E92A02F3E7844603F1FFD92BE1AC5823F5D5C98BDFCCD8BBFB0B7C83EDD32183FCB8A293F1E689ABF2B811B3F78120CBF3EE6953F0EACC73DB79F763F6C1F573FC277A0BF4AA17C3F6D43FDBEC13AA4BF6B89743F464CA43FE0752ABF9AAC103FDC4D933EFFB308BDF6EB87BF4558EABDB6C9AFBE351FC93FB136443EBD87C23E303B14BEEC3A233F460590BE5939AABF476B11BEC7BD08BF2BFC05BF8B8B5C3F051063BFF0B9563F1192933FAA6BE1BFAD26BDBFD5B9E0BFF8FC9B3DAD0F8ABF225DB83F357FE2BD1DAD133FF93B2DBE791F83BD21EB843F9625683F8D76F3BE0DE95EBF7B37143ECD90F33FF5E1C73E1A4521BD482D4DBFFCB7FDBE5F18B9BEFBC9153F06F893BF3ECE12BE146A47BEDE3BAFBDA17FB23F71CE183FE637F7BE4771BBBEDBDCA9BFECFED83F253104409A926FBED012353F087E143FE45E893EA7C503C094B5083FA40F09BF26195DBF5777C0BC47F9953FBA20CC3E157C4BBEDEF593BF8222A2BE60B7703F68CF92BFBC0D0F3FAFB04A3FA51B3DBE71553BBFD52CA5BD43E57ABFE7C5773D4258FABEB15050BF2EEB513FA71722BF86BAA53FFD3DBB3FBDD41EBF14077D3F7446DDBE468B1FBF6B6F5DBEAB33FABEF275493F8758DC3D2E2689BF06E5EEBD192C82BF5B5799BFCBF5F43E0E619DBF5A5DAFBFC792C53F100408BD3256D6BE93DD82BEFB5404BEC09E5FBDD312D13EC22C903FF6AFF73FD3FB803F1998803F4EF6DDBE710D9FBF236CA43F719F793E3DC6073F4C126EBC02160FC0E0A6BB3F190A9CBF43EC243F2F857B402AD2FEBD0737973E40EBC33E8ABA0CBF20797EBFA947AC3FA80BF93FA52AA5BFD15D16C03C6804C0D2CF683F9FD231BF7ECFFA3F3B4A8DBF45880A3F96FCC43FA8038B3F338A9F3F79ACEB3D7845CF3F3D69ED3E807EA63F098C5F3F2661853D21F3453FFE5A78BFCB3E63BF5AFAA2BEF636ABBEDE97E83EC676FF3E71C4603F4065C73EC633BB3FD381F53EE78C08BF92EE0DBD9D44283FCB589FBE77DF0FBF598CF7BE96D4A2BFD53132BE98DA0D3FD5033ABECB1970BE8EA1963E521D4C3FCFD1A13F6D7C6F3F80A30B3F28C9C4BFF5F79F3E8D743D3FD6A0B93F6F3F834006228F3F748EC8BF09F032BFFC0A133FDB789E3F70FA23BF7EB443BFEA9E763E826B2A3E0DD60EC0ADD1B13FDE9800BF2C00D73FE41083BF5ECCD73F55DD9BBFA3D4433F2B3B993F277936BF774C86BD3C1E0D407B80E43F82FD41BC77CB7A3F607488BFB4CFE23F31FB8EBE06C68DBE94B93F3F7AB924BF80A673BFD6048B3E98EC2B3F38CCEC3F0D71983FD60017BF2CF6763F6C32C1BFE45D10402D499D3F528EF8BE803AE83E24FCAC3FAC2BDE3E7C6403BFD27D3EBE11238D3E7DA5E03D7006B83E02F540BFBAE76A3E7B4682BEE23DCA3FA73A7ABE697C99BFCC6BD2BC3AB4E63FB7A287BFE8C759405B9411BF4E73F3BEF81FDF3F305051BE1101A2BE6599A53F8E31AC3F3299463EA42CC93FDBF5C3BE1892B23F587CAF3E0360CDBFA45916BF0FB3193FC827E03E088AC5BDFF18A93EF40440BE0EAAB6BFA1B1173F9D3F94BF0C7A123D67325D3E38846ABF35A9C73F9FD649C06AA40FBFE74FDCBE7E9CAABE58F0C5BF2E1F71BC77D09C3F5CFCCB3FE7D4D0BFD2F768BD5531213FA8D68A3E969C2FBFEABF8BBF54FFD63FA97D61BF087D143F597CBA3EA17FB43DDD48A7BF93D434BF4A2828BE24B278BFB2F283BF17B4253F903043BE7076373F1A0300C0D6371AC063B0603E4374D9BF359BA73F4FA5D4BF6ECB0BBF5A5321BF6E7822BF9D83793FF5E0563E94DBF43C38C8DA3F51CB39BF880646BF7EA1183FBA0DA0BFCDA2923F82453D3FCB68A03F8898E3BE1186513F826951BF597BB83E96ABCEBF8E4B1EC01718143D3137AFBE2E6DC3BE71F968BD51F7573FD2D02E3FC73D5940849AD5BFA1C7023FA36C92BEE88BAB3E0A02963F04D3A53F820F643F5DCDFABEA31996BF36E22FBF516E15C07D98C03DA1EE4EBE95CF73BD04C20040F66FACBEE5E6A63EFF02093FC094FC3FC07D54BE7677FABC06C5013EF3BFB53B9B594B3F7076D03E2CC8B8BE6EB6A73FB10D77BFC06F613F16DED1BD88502DBF2142D2BED32CCFBF4406023F48AB14403A4A6B3E4E9707BF07915FBF61A38B3B6F02A1BFCCCF8ABF43C3403F28B5A53E1DCE8CBE4A1EA73F78D5583EA53E8B3E98456DBF7AE92EC0B06D10BFAE498CBEA4220F3E1F31023F04E08D3E2D337BBF728B633FD6D4C83F59A2A7BD92E4B2BEE6484F3EFEA693BE54DB173E7ECC1A409FF7A93FB01887BE479BBA3E2AD122403B202CC0B5531C4061FB293CE2197FBFFF7E7A3F5D04E2BE79A785BE36484C3FE9B68DBF2628154031D843BFED2EF3BE4392FDBE041F4BBE96C00D401AF80BBE185382BFE8AF363E5B7A03BF697E10BF2C1A6BBF67E33FBF356CC2BD2FE98C3F2DBDA73FD2EF95BEEDD049BFFB962DBEEF300BC02262383F0026923EDE866A3E2942A43FCB89B0BF066F0A3F82A372BFD3FE4E3E4795B3BE77850B3F6546C53F47A9193F5310ADBEFB2FCF3E16A4643FA71FBABFC9FF973F235B99BEE1F61240473DA93E662F0B40627B9FBF83C81F4048F634BFE641933F8ABD0CBFC9C5503FEE08004027F2E0BEBD21DDBEB423F2BE6ABAA63E3F3F79BFAE424C3FD1C312BFA4FE523EACDD5A3E4D53743F00AA3B3F5144BABF59EE02C0255335BE9AC11F3F342ED8BFDB4C513F4E79C7BEBF88A33F2AC2033FDF70B23E01D984BF816C75BF7C0D6B3FA643FA3EBAE27B3FC3027F3F033895BFE0DA15BF4FA93EBE81649EBFF989973F192548BE0016ABBF7E8B863F957283BF9B3293BE638AEC3FF64619C0C5BDD03E92F62DBEAA8C153F8374863FDA8DA43F1FEACEBFB8DA44BF18389CBF86B8123F90FE323F608A803E3A918E3E80CFC1BDA922CE3F782BF9BDF472B2BF23A067BF8582B1BEB776343FA138FA3C5DAF5ABF02F0093F0DC806BF5080AABF13C7C53F6F37D13E447F03C0BBA1063F7D76193FA9CDD0BEAAF2E73E9D98C8BE7EFB0840CB2653BEF17FC9BD278FF83E5C23353FFE64303D03FEE0BEDB152DBFD193DE3F193A71BF544688BFE5386BBED7D1A0BF67980E3FC365213EFE76833F18599D3F8551A0BA2E9FE7BFE04B313F105F993F4D89A83F5857B2BE7A8F9A3F1ED825BF54CA063F156773BF285109C09DF2C33E40CAD1BE1B153DBF13E0D33F1637053FE5326EBE65ADFE3EBF7B893E5C0ABD3FB3A7B53E73F6CF3F8AEA173F49DADCBF6A3C1FBFC6C7CCBBA72B653F2F4FFCBBE005393DEC4F143FFA8FCABF8D7916BFB06FE9BD6991333F353C0EBF4E6DC3BE513935BD5C03053FA694423F05BF83BF450DA0BF3AD8E8BD76301DBFB65E5A3F14D21E3EDC8E8D3F07178C3F6AFD113FEABF463F"> : tensor<50x16xf32>
      %1 = tensor.empty() : tensor<2x8x16xf32>
      %2 = tensor.empty() : tensor<2x8x1xf32>
      %3 = linalg.generic {indexing_maps = [#emb_ln_map, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg1 : tensor<2x8xi64>) outs(%1 : tensor<2x8x16xf32>) {
      ^bb0(%in: i64, %out: f32):
        %16 = arith.index_cast %in : i64 to index
        %17 = linalg.index 2 : index
        %18 = arith.cmpi sge, %16, %c0 : index
        %19 = arith.cmpi slt, %16, %c50 : index
        %20 = arith.andi %18, %19 : i1
        %21 = arith.select %20, %16, %c0 : index
        %extracted = tensor.extract %cst_4[%21, %17] {fusion.guarded, fusion.index_check = array<i64: 1, 0>} : tensor<50x16xf32>
        linalg.yield %extracted : f32
      } -> tensor<2x8x16xf32>
      %4 = linalg.fill ins(%cst_3 : f32) outs(%2 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
      %5 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%3 : tensor<2x8x16xf32>) outs(%4 : tensor<2x8x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %16 = arith.addf %in, %out : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x1xf32>
      %6 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5 : tensor<2x8x1xf32>) outs(%2 : tensor<2x8x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %16 = arith.divf %in, %cst_2 : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x1xf32>
      %7 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map2, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3, %6 : tensor<2x8x16xf32>, tensor<2x8x1xf32>) outs(%1 : tensor<2x8x16xf32>) {
      ^bb0(%in: f32, %in_5: f32, %out: f32):
        %16 = arith.subf %in, %in_5 : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x16xf32>
      %8 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map1, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%7, %7 : tensor<2x8x16xf32>, tensor<2x8x16xf32>) outs(%1 : tensor<2x8x16xf32>) {
      ^bb0(%in: f32, %in_5: f32, %out: f32):
        %16 = arith.mulf %in, %in_5 : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x16xf32>
      %9 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%8 : tensor<2x8x16xf32>) outs(%4 : tensor<2x8x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %16 = arith.addf %in, %out : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x1xf32>
      %10 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%9 : tensor<2x8x1xf32>) outs(%2 : tensor<2x8x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %16 = arith.divf %in, %cst_2 : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x1xf32>
      %11 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%10 : tensor<2x8x1xf32>) outs(%2 : tensor<2x8x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %16 = arith.truncf %cst_1 : f64 to f32
        %17 = arith.addf %in, %16 : f32
        linalg.yield %17 : f32
      } -> tensor<2x8x1xf32>
      %12 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%11 : tensor<2x8x1xf32>) outs(%2 : tensor<2x8x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %16 = math.rsqrt %in : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x1xf32>
      %13 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map2, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%7, %12 : tensor<2x8x16xf32>, tensor<2x8x1xf32>) outs(%1 : tensor<2x8x16xf32>) {
      ^bb0(%in: f32, %in_5: f32, %out: f32):
        %16 = arith.mulf %in, %in_5 : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x16xf32>
      %14 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map3, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%13, %cst_0 : tensor<2x8x16xf32>, tensor<16xf32>) outs(%1 : tensor<2x8x16xf32>) {
      ^bb0(%in: f32, %in_5: f32, %out: f32):
        %16 = arith.mulf %in, %in_5 : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x16xf32>
      %15 = linalg.generic {indexing_maps = [#emb_ln_map1, #emb_ln_map3, #emb_ln_map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%14, %cst : tensor<2x8x16xf32>, tensor<16xf32>) outs(%1 : tensor<2x8x16xf32>) {
      ^bb0(%in: f32, %in_5: f32, %out: f32):
        %16 = arith.addf %in, %in_5 : f32
        linalg.yield %16 : f32
      } -> tensor<2x8x16xf32>
      fusion.yield %15 : tensor<2x8x16xf32>
    }
    return %0 : tensor<2x8x16xf32>
  }
  func.func private @fusec_index_error(i64, i64)
}

// -----

// The first group of @main with an element of the exp (a tensor.extract) read by the sum's
// payload, past the reshape: cut there, a scalar would pass from one kernel to the next, and
// kernels hand each other tensors only (the e2e suite's nll_loss backward 1-D). The group
// stays whole.
// CHECK-LABEL: func.func @scalar_across_the_cut
// CHECK: fusion.group vertical
// CHECK-NOT: fusion.split
// CHECK: math.exp
// CHECK: tensor.extract
// CHECK: tensor.expand_shape
// CHECK: linalg.transpose
// CHECK: arith.addf
// CHECK: arith.mulf
// CHECK-NOT: fusion.group
// CHECK: return
#mm = affine_map<(d0, d1) -> (d0, d1)>
#m3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#r3 = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @scalar_across_the_cut(%x: tensor<16x32xf32>) -> tensor<4x16xf32> {
  %g = fusion.group vertical (%a = %x : tensor<16x32xf32>) -> tensor<4x16xf32> {
    %e = tensor.empty() : tensor<16x32xf32>
    %ex = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<16x32xf32>
    %c0 = arith.constant 0 : index
    %el = tensor.extract %ex[%c0, %c0] : tensor<16x32xf32>
    %r = tensor.expand_shape %ex [[0], [1, 2]] output_shape [16, 4, 8] : tensor<16x32xf32> into tensor<16x4x8xf32>
    %e2 = tensor.empty() : tensor<4x16x8xf32>
    %t = linalg.transpose ins(%r : tensor<16x4x8xf32>) outs(%e2 : tensor<4x16x8xf32>) permutation = [1, 0, 2]
    %z = arith.constant 0.0 : f32
    %e3 = tensor.empty() : tensor<4x16xf32>
    %f = linalg.fill ins(%z : f32) outs(%e3 : tensor<4x16xf32>) -> tensor<4x16xf32>
    %s = linalg.generic {indexing_maps = [#m3, #r3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t : tensor<4x16x8xf32>) outs(%f : tensor<4x16xf32>) {
    ^bb0(%i: f32, %o: f32):
      %p = arith.addf %i, %o : f32
      %q = arith.mulf %p, %el : f32
      linalg.yield %q : f32
    } -> tensor<4x16xf32>
    fusion.yield %s : tensor<4x16xf32>
  }
  return %g : tensor<4x16xf32>
}

// -----

// GroupNorm's statistics as torch-mlir writes them (4 groups of 4 channels x 64 pixels): a
// mean over two dims of the reshaped input, read back at every element by `x - mean`, whose
// squares are summed again. Neither emitter builds it whole (the fast emitter reduces one
// contiguous last dim; the data-movement family would fold the mean again at each element),
// and it has no reshape of a computed value: it is cut after each reduction read back, the
// mean one kernel, the variance another that reads the mean, the input reshaped again in
// each (no reshaped copy written out).
// CHECK-LABEL: func.func @group_norm_statistics
// CHECK: %[[M:.+]] = fusion.group vertical (%{{.+}} = %arg0 : tensor<2x16x64xf32>) -> tensor<2x4x1xf32>
// CHECK-SAME: fusion.split = "reduction read back"
// CHECK: tensor.expand_shape
// CHECK: linalg.fill
// CHECK: arith.addf
// CHECK-NOT: arith.mulf
// CHECK: fusion.yield
// CHECK: %[[V:.+]] = fusion.group vertical (%{{.+}} = %arg0 : tensor<2x16x64xf32>, %{{.+}} = %[[M]] : tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
// CHECK: tensor.expand_shape
// CHECK: linalg.fill
// CHECK: arith.subf
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: return %[[V]]
#in = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#red = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0)>
#bc = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0)>
func.func @group_norm_statistics(%x: tensor<2x16x64xf32>) -> tensor<2x4x1xf32> {
  %g = fusion.group vertical (%a = %x : tensor<2x16x64xf32>) -> tensor<2x4x1xf32> {
    %r = tensor.expand_shape %a [[0], [1, 2], [3]] output_shape [2, 4, 4, 64] : tensor<2x16x64xf32> into tensor<2x4x4x64xf32>
    %z = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x4x1xf32>
    %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %s = linalg.generic {indexing_maps = [#in, #red], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%r : tensor<2x4x4x64xf32>) outs(%f : tensor<2x4x1xf32>) {
    ^bb0(%i: f32, %o: f32):
      %p = arith.addf %i, %o : f32
      linalg.yield %p : f32
    } -> tensor<2x4x1xf32>
    %e2 = tensor.empty() : tensor<2x4x4x64xf32>
    %d = linalg.generic {indexing_maps = [#in, #bc, #in], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%r, %s : tensor<2x4x4x64xf32>, tensor<2x4x1xf32>) outs(%e2 : tensor<2x4x4x64xf32>) {
    ^bb0(%i: f32, %m: f32, %o: f32):
      %c = arith.constant 3.90625e-03 : f32
      %mean = arith.mulf %m, %c : f32
      %t = arith.subf %i, %mean : f32
      %q = arith.mulf %t, %t : f32
      linalg.yield %q : f32
    } -> tensor<2x4x4x64xf32>
    %v = linalg.generic {indexing_maps = [#in, #red], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%d : tensor<2x4x4x64xf32>) outs(%f : tensor<2x4x1xf32>) {
    ^bb0(%i: f32, %o: f32):
      %p = arith.addf %i, %o : f32
      linalg.yield %p : f32
    } -> tensor<2x4x1xf32>
    fusion.yield %v : tensor<2x4x1xf32>
  }
  return %g : tensor<2x4x1xf32>
}

// -----

// ViT's embedding: the class token concatenated to the patches, positions added, then a
// row reduction (LayerNorm's mean; here the row normalised by its sum). A concat is no
// fast-emitter kernel and a reduction read back is no data-movement kernel: the group is cut
// before the reduction, as after a gather: the concat and the add (a data-movement kernel),
// the rows reading their result (a row kernel). The concat must not stay with the reduction.
// CHECK-LABEL: func.func @concat_then_rows
// CHECK: %[[EMB:.+]] = fusion.group vertical
// CHECK-SAME: fusion.split
// CHECK: tensor.concat
// CHECK: arith.addf
// CHECK-NOT: "reduction"
// CHECK: fusion.yield
// CHECK: fusion.group vertical (%{{.*}} = %[[EMB]]
// CHECK-NOT: tensor.concat
// CHECK: "reduction"
// CHECK: fusion.yield
#c3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#r3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
func.func @concat_then_rows(%patches: tensor<1x4x16xf32>) -> tensor<1x5x16xf32> {
  %0 = fusion.group vertical (%p = %patches : tensor<1x4x16xf32>) -> tensor<1x5x16xf32> {
    %cls = arith.constant dense<0.5> : tensor<1x1x16xf32>
    %pos = arith.constant dense<0.25> : tensor<1x5x16xf32>
    %zero = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<1x5x16xf32>
    %er = tensor.empty() : tensor<1x5x1xf32>
    %cat = tensor.concat dim(1) %cls, %p : (tensor<1x1x16xf32>, tensor<1x4x16xf32>) -> tensor<1x5x16xf32>
    %x = linalg.generic {indexing_maps = [#c3, #c3, #c3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%cat, %pos : tensor<1x5x16xf32>, tensor<1x5x16xf32>) outs(%e : tensor<1x5x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    } -> tensor<1x5x16xf32>
    %f = linalg.fill ins(%zero : f32) outs(%er : tensor<1x5x1xf32>) -> tensor<1x5x1xf32>
    %sum = linalg.generic {indexing_maps = [#c3, #r3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<1x5x16xf32>) outs(%f : tensor<1x5x1xf32>) {
    ^bb0(%a: f32, %o: f32):
      %s = arith.addf %a, %o : f32
      linalg.yield %s : f32
    } -> tensor<1x5x1xf32>
    %y = linalg.generic {indexing_maps = [#c3, #r3, #c3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %sum : tensor<1x5x16xf32>, tensor<1x5x1xf32>) outs(%e : tensor<1x5x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.divf %a, %b : f32
      linalg.yield %d : f32
    } -> tensor<1x5x16xf32>
    fusion.yield %y : tensor<1x5x16xf32>
  }
  return %0 : tensor<1x5x16xf32>
}

// -----

// A top-k's shape: row statistics (the max, read back by `x - max`, and the sum of the
// exponentials) concatenated into one [rows, 2] output. Neither group-level emitter builds
// reductions and a concat in one kernel (the fast emitter takes no concat, the data-movement
// kernels no reduction read back), and there is no reshape to cut at: the group is cut before
// the concat, the statistics a row kernel with two outputs, the concat a data-movement kernel
// reading them. (A concat before the reductions, @concat_then_rows above, is cut there
// instead.)
// CHECK-LABEL: func.func @concat_of_reductions
// CHECK: %[[ROWS:.+]]:2 = fusion.group vertical
// CHECK-SAME: fusion.split = "concat of reductions"
// CHECK-NOT: tensor.concat
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: fusion.yield
// CHECK: fusion.group single (%{{.*}} = %[[ROWS]]#{{[01]}} : tensor<8x1xf32>, %{{.*}} = %[[ROWS]]#{{[01]}} : tensor<8x1xf32>) -> tensor<8x2xf32>
// CHECK-SAME: fusion.split = "concat of reductions"
// CHECK-NEXT: tensor.concat
// CHECK-NEXT: fusion.yield
#x2 = affine_map<(d0, d1) -> (d0, d1)>
#k2 = affine_map<(d0, d1) -> (d0, 0)>
func.func @concat_of_reductions(%x: tensor<8x16xf32>) -> tensor<8x2xf32> {
  %0 = fusion.group vertical (%a = %x : tensor<8x16xf32>) -> tensor<8x2xf32> {
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<8x16xf32>
    %er = tensor.empty() : tensor<8x1xf32>
    %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<8x1xf32>) -> tensor<8x1xf32>
    %max = linalg.generic {indexing_maps = [#x2, #k2], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<8x16xf32>) outs(%fm : tensor<8x1xf32>) {
    ^bb0(%i: f32, %o: f32):
      %m = arith.maximumf %i, %o : f32
      linalg.yield %m : f32
    } -> tensor<8x1xf32>
    %ex = linalg.generic {indexing_maps = [#x2, #k2, #x2], iterator_types = ["parallel", "parallel"]} ins(%a, %max : tensor<8x16xf32>, tensor<8x1xf32>) outs(%e : tensor<8x16xf32>) {
    ^bb0(%i: f32, %m: f32, %o: f32):
      %d = arith.subf %i, %m : f32
      %t = math.exp %d : f32
      linalg.yield %t : f32
    } -> tensor<8x16xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%er : tensor<8x1xf32>) -> tensor<8x1xf32>
    %sum = linalg.generic {indexing_maps = [#x2, #k2], iterator_types = ["parallel", "reduction"]} ins(%ex : tensor<8x16xf32>) outs(%fs : tensor<8x1xf32>) {
    ^bb0(%i: f32, %o: f32):
      %s = arith.addf %i, %o : f32
      linalg.yield %s : f32
    } -> tensor<8x1xf32>
    %cat = tensor.concat dim(1) %max, %sum : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x2xf32>
    fusion.yield %cat : tensor<8x2xf32>
  }
  return %0 : tensor<8x2xf32>
}
